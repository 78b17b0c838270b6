// A rendezvous store over TCP, for jobs without a shared directory: rank 0
// serves a small in-memory key-value table at "host:port" for as long as the
// group is joining, and every rank (rank 0 too) is its client. The Debian
// build of Gloo (2022) has no TCPStore of its own. It carries only the
// rendezvous (a few hundred bytes per rank); the collectives go over Gloo's
// TCP transport. Internal to libkiln_dist.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "kiln/dist/store.hpp"

namespace kiln::dist::detail {

// `serve`: this process listens on `address` (rank 0). Clients retry
// connecting until `timeout` (rank 0 may start later than the others).
// DistError for an address that does not parse, resolve or bind; a
// DistTimeoutError when the server cannot be reached in time.
std::unique_ptr<Store> make_tcp_store(const std::string& address, bool serve,
                                      const std::string& prefix, std::chrono::milliseconds timeout);

}  // namespace kiln::dist::detail
