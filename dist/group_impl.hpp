// GroupImpl: what a dist::Group holds when its world has more than one
// process: the Gloo context (full TCP mesh), the communication thread, the
// failure state, and the agreement check every collective starts with.
// Internal to libkiln_dist.
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/dist/comm_thread.hpp"
#include "kiln/dist/dist.hpp"

namespace gloo {
class Context;
}

namespace kiln::dist::detail {

// What every rank says about a collective before its data moves; all ranks
// must say the same. An allgather of it is also the barrier.
struct Header {
  std::uint64_t op = 0;  // Op
  std::uint64_t leaves = 0;
  std::uint64_t signature = 0;  // structure, dtypes and shapes (signature())
  std::uint64_t bytes = 0;
  std::uint64_t root = 0;
};
enum class Op : std::uint64_t { kInit = 1, kBarrier, kAllReduceMean, kBroadcast };
std::string_view op_name(Op op);

// A hash of node kinds, arities, dtypes and shapes that is the same in every
// process (absl::Hash is seeded per process, and statics such as function
// pointers differ between processes, so TreeDef::hash() is not).
std::uint64_t signature(const TreeDef& def, std::span<const Array> leaves);

class GroupImpl {
 public:
  Options options;
  Stats stats;

  explicit GroupImpl(const Options& opts);  // connects; see Group(Options)
  ~GroupImpl();

  // "[dist.all_reduce_mean] rank 1 of 3: "
  std::string who(std::string_view op) const;
  // Throws DistError when an earlier collective failed.
  void check_usable(std::string_view op) const;
  // Records the group's first failure (later collectives throw it at once).
  void mark_failed(std::string message);
  // Runs body(tag) on the communication thread as part of collective `op`.
  // Gloo exceptions become DistError / DistTimeoutError and break the group.
  // A job submitted after a failure throws that failure without running.
  std::future<void> submit(std::string_view op, std::function<void(std::uint32_t tag)> body);
  // Waits for each future in order; if any throws, still waits for the rest
  // (their buffers must outlive them), then rethrows the first exception.
  static void wait_all(std::vector<std::future<void>>& jobs);
  // Allgathers `mine`; throws DistError naming what each rank said when the
  // ranks disagree (the group stays usable: every rank throws).
  void agree(Op op, const Header& mine);
  // Host memory for bucket k of at least `bytes`, kept between calls: a
  // training loop reduces the same buckets every step, and fresh memory
  // page-faults at first touch (uninitialised; the caller fills it).
  std::byte* bucket_memory(std::size_t k, std::size_t bytes);
  // The Gloo context, for jobs.
  const std::shared_ptr<gloo::Context>& context() const { return context_; }

 private:
  void connect();
  [[noreturn]] void fail(std::string_view op, const std::exception& e);

  std::shared_ptr<gloo::Context> context_;
  std::uint32_t next_tag_ = 1;  // caller's thread only; the same on every rank
  mutable std::mutex mutex_;
  std::string failure_;  // the first failure, "" while usable
  std::vector<std::pair<std::unique_ptr<std::byte[]>, std::size_t>> buckets_;
  std::unique_ptr<CommThread> comm_;  // last member: joined first
};

}  // namespace kiln::dist::detail
