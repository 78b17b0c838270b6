// all_reduce_mean and broadcast over a tree's leaves: check the leaves, agree
// with the other ranks, then the bucket pipeline. This thread stages bucket
// k + 1 (device read, f16 -> f32) while the communication thread runs bucket
// k's Gloo collective, and unstages bucket k (divide, round, upload to the
// leaf's device) while bucket k + 1 is on the wire.
#include <gloo/allreduce.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>

#include <chrono>
#include <functional>

#include "kiln/dist/buckets.hpp"
#include "kiln/dist/group_impl.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::dist {

using kiln::detail::str_cat;
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Arrays a collective can read: concrete (not tracers), not donated, and for
// a mean, floating point. Paths are built only for the message.
void check_leaves(const detail::GroupImpl& g, std::string_view op, const TreeDef& def,
                  std::span<const Array> leaves, bool floating_only) {
  auto path = [&](std::size_t i) { return tree::display_path(tree::paths(def)[i]); };
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    const Array& a = leaves[i];
    if (a.impl()->trace_id != 0) {
      throw ValueError(str_cat(g.who(op), path(i),
                               " is a tracer: call dist collectives outside "
                               "filter_jit and grad, on the arrays a jitted step returns"));
    }
    if (a.is_donated()) {
      throw ValueError(str_cat(g.who(op), path(i),
                               " was donated to a jitted call (std::move) "
                               "and has no contents any more"));
    }
    if (floating_only && !is_inexact(a.dtype())) {
      throw DTypeError(
          str_cat(g.who(op), path(i), " has dtype ", name(a.dtype()),
                  ": all_reduce_mean averages floating-point leaves (f16, bf16, f32, f64) only; "
                  "leave integer and bool leaves out of the tree (grad gives None for them)"));
    }
  }
}

std::size_t total_bytes(std::span<const Array> leaves) {
  std::size_t n = 0;
  for (const Array& a : leaves) n += a.nbytes();
  return n;
}

using ReduceFn = void (*)(void*, const void*, const void*, std::size_t);
using Collective = std::function<void(const detail::Bucket&, std::byte* data, std::uint32_t tag)>;

// The bucket pipeline of one collective. `stage`: this rank's leaves go into
// the buckets; `unstage`: the results come out of them (else the leaves are
// returned as they are: the root of a broadcast).
std::vector<Array> pipeline(detail::GroupImpl& g, std::string_view op,
                            std::span<const Array> leaves,
                            const std::vector<detail::Bucket>& buckets, bool stage, bool unstage,
                            int divisor, const Collective& collective) {
  const auto start = Clock::now();
  std::vector<std::byte*> data(buckets.size());
  std::vector<std::future<void>> jobs;
  double comm_s = 0;  // written by the communication thread, read after its jobs
  detail::Stager stager(leaves, buckets);
  try {
    for (std::size_t k = 0; k < buckets.size(); ++k) {
      const auto t = Clock::now();
      data[k] = g.bucket_memory(k, buckets[k].nbytes());
      if (stage) stager.stage(buckets[k], data[k]);
      g.stats.stage_s += since(t);
      jobs.push_back(g.submit(op, [&, k](std::uint32_t tag) {
        const auto t0 = Clock::now();
        collective(buckets[k], data[k], tag);
        comm_s += since(t0);
      }));
    }
  } catch (...) {
    // Staging failed (a device read): the other ranks wait for buckets that
    // will not come, so this group is done.
    g.mark_failed(str_cat(g.who(op), "staging a bucket failed on this rank"));
    try {
      detail::GroupImpl::wait_all(jobs);
    } catch (...) {
    }
    throw;
  }

  detail::Unstager unstager(leaves, buckets, divisor);
  std::exception_ptr failed;
  for (std::size_t k = 0; k < jobs.size(); ++k) {
    try {
      jobs[k].get();  // waits even after a failure: jobs use data[k]
      if (!failed && unstage) {
        const auto t = Clock::now();
        unstager.unstage(buckets[k], data[k]);
        g.stats.unstage_s += since(t);
      }
    } catch (...) {
      if (!failed) failed = std::current_exception();
    }
  }
  if (failed) std::rethrow_exception(failed);
  g.stats.buckets = buckets.size();
  for (const auto& b : buckets) g.stats.bytes += b.nbytes();
  g.stats.reduce_s = comm_s;
  std::vector<Array> out =
      unstage ? unstager.take() : std::vector<Array>(leaves.begin(), leaves.end());
  g.stats.wall_s = since(start);
  return out;
}

}  // namespace

std::vector<Array> Group::all_reduce_mean_leaves(const TreeDef& def,
                                                 std::span<const Array> leaves) const {
  detail::GroupImpl& g = *impl_;
  constexpr std::string_view kOp = "all_reduce_mean";
  check_leaves(g, kOp, def, leaves, true);
  g.stats = Stats{};
  if (world_size() == 1) return {leaves.begin(), leaves.end()};
  g.check_usable(kOp);
  g.agree(detail::Op::kAllReduceMean,
          {static_cast<std::uint64_t>(detail::Op::kAllReduceMean), leaves.size(),
           detail::signature(def, leaves), total_bytes(leaves), 0});
  const auto context = g.context();
  const auto timeout = g.options.timeout;
  return pipeline(g, kOp, leaves, detail::plan_reduce(leaves, g.options.bucket_bytes), true, true,
                  world_size(), [&](const detail::Bucket& b, std::byte* data, std::uint32_t tag) {
                    gloo::AllreduceOptions o(context);
                    if (b.type == detail::BucketType::kF32) {
                      o.setOutput(reinterpret_cast<float*>(data), b.elements);
                      o.setReduceFunction(static_cast<ReduceFn>(&gloo::sum<float>));
                    } else {
                      o.setOutput(reinterpret_cast<double*>(data), b.elements);
                      o.setReduceFunction(static_cast<ReduceFn>(&gloo::sum<double>));
                    }
                    // Ring: each element is summed once, by one rank, and that sum is
                    // sent to the others, so every rank gets the same bits.
                    o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
                    o.setTag(tag);
                    o.setTimeout(timeout);
                    gloo::allreduce(o);
                  });
}

std::vector<Array> Group::broadcast_leaves(const TreeDef& def, std::span<const Array> leaves,
                                           int root) const {
  detail::GroupImpl& g = *impl_;
  constexpr std::string_view kOp = "broadcast";
  if (root < 0 || root >= world_size()) {
    throw ValueError(str_cat(g.who(kOp), "root ", root, " is outside [0, ", world_size(), ")"));
  }
  check_leaves(g, kOp, def, leaves, false);
  g.stats = Stats{};
  if (world_size() == 1) return {leaves.begin(), leaves.end()};
  g.check_usable(kOp);
  g.agree(detail::Op::kBroadcast,
          {static_cast<std::uint64_t>(detail::Op::kBroadcast), leaves.size(),
           detail::signature(def, leaves), total_bytes(leaves), static_cast<std::uint64_t>(root)});
  const bool sending = rank() == root;
  const auto context = g.context();
  const auto timeout = g.options.timeout;
  return pipeline(g, kOp, leaves, detail::plan_bytes(leaves, g.options.bucket_bytes), sending,
                  !sending, 1, [&](const detail::Bucket& b, std::byte* data, std::uint32_t tag) {
                    gloo::BroadcastOptions o(context);
                    o.setOutput(reinterpret_cast<char*>(data), b.elements);
                    o.setRoot(root);
                    o.setTag(tag);
                    o.setTimeout(timeout);
                    gloo::broadcast(o);
                  });
}

}  // namespace kiln::dist
