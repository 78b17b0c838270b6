// Rendezvous stores for kiln::dist: Gloo's Store interface (what Gloo's
// connectFullMesh exchanges addresses through) with a non-blocking lookup and
// waits that keep to the millisecond, over a directory (Gloo's FileStore) or
// over TCP (tcp_store.hpp). Every key is prefixed with the run id. Internal to
// libkiln_dist.
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kiln::dist::detail {

class Store : public gloo::rendezvous::Store {
 public:
  Store(std::string prefix, std::chrono::milliseconds timeout)
      : prefix_(std::move(prefix) + "/"), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  // Polls every few milliseconds; throws DistTimeoutError naming the keys
  // still missing after `timeout`.
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;
  bool has(const std::string& key) { return lookup(prefix_ + key).has_value(); }
  // Where the store is, for messages ("directory /tmp/x", "tcp 10.0.0.1:29500").
  virtual std::string where() const = 0;

 protected:
  virtual void put(const std::string& key, const std::vector<char>& data) = 0;
  virtual std::optional<std::vector<char>> lookup(const std::string& key) = 0;

 private:
  std::string prefix_;
  std::chrono::milliseconds timeout_;
};

// Keys as files in `directory` (created if missing), through Gloo's FileStore.
std::unique_ptr<Store> make_file_store(const std::string& directory, const std::string& prefix,
                                       std::chrono::milliseconds timeout);

}  // namespace kiln::dist::detail
