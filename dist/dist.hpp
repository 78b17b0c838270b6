// kiln::dist: data-parallel training across processes, on Gloo's collectives
// (TCP transport). Each process holds a full copy of the model, computes the
// gradient of its shard of the batch, and the group averages the gradients:
//
//   dist::Group group = dist::init();          // KILN_RANK, KILN_WORLD_SIZE, ...
//   model = group.broadcast(model);            // every rank starts from rank 0's
//   auto [loss, g] = grad_step(model, x_shard, y_shard);   // jitted
//   g = group.all_reduce_mean(g);              // the same mean on every rank
//   std::tie(model, state) = update_step(model, state, g); // jitted
//
// Without KILN_WORLD_SIZE, init() gives a world of one process in which every
// operation returns its input, so the same program runs undistributed.
// docs/MODELS.md ("Data parallel") describes the data flow; a failed or
// missing peer is a DistError / DistTimeoutError (dist/error.hpp) on every
// other rank within Options::timeout, never a hang.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kiln/dist/error.hpp"
#include "kiln/runtime/array.hpp"
#include "kiln/runtime/tree.hpp"

namespace kiln::dist {

struct Options {
  int rank = 0;
  int world_size = 1;
  // Rendezvous, needed when world_size > 1: a directory every rank can reach
  // (Gloo's FileStore; use a fresh one per job, or a fresh run_id), or the
  // "host:port" where rank 0 serves a small TCP key-value store.
  std::string store_path;
  std::string store_address;
  // Prefix of every rendezvous key, so jobs can share a store.
  std::string run_id = "kiln";
  // The address this rank's Gloo transport listens on; peers connect to it.
  // Loopback is right for processes of one machine; set it to this machine's
  // address (or hostname) for a job across machines.
  std::string host = "127.0.0.1";
  // How long init waits for every rank to join, and how long any collective
  // waits for a peer before it fails with DistTimeoutError.
  std::chrono::milliseconds timeout{120'000};
  // Gradients are averaged in flat buckets of at most this many bytes (see
  // all_reduce_mean); a bucket is the unit that overlaps with staging. Each
  // bucket is one Gloo allreduce, which costs 1-3 ms beyond its bytes on a
  // loopback VM, so smaller buckets pipeline more but pay that more often
  // (docs/PERFORMANCE.md).
  std::size_t bucket_bytes = std::size_t{4} << 20;
};

// Options from the environment: KILN_RANK, KILN_WORLD_SIZE, KILN_DIST_STORE
// (directory) or KILN_DIST_ADDR (host:port), KILN_DIST_RUN_ID, KILN_DIST_HOST,
// KILN_DIST_TIMEOUT (seconds, may be fractional), KILN_DIST_BUCKET_MB. Without
// KILN_WORLD_SIZE: a world of one. ValueError naming the variable for values
// that do not parse or do not fit.
Options options_from_env();

// What the last all_reduce_mean / broadcast of a group did, for benchmarks and
// for checking overlap: stage_s + reduce_s + unstage_s > wall_s means the
// collective ran while this thread staged or unstaged other buckets.
struct Stats {
  std::size_t buckets = 0;
  std::size_t bytes = 0;  // bytes sent through the collective (per rank)
  double stage_s = 0;     // reading leaves to host buckets (this thread)
  double reduce_s = 0;    // Gloo collectives (the communication thread)
  double unstage_s = 0;   // buckets back into arrays (this thread)
  double wall_s = 0;      // the whole call
};

namespace detail {
class GroupImpl;
}

// One process's membership in a group of world_size processes. A cheap shared
// handle; the connection closes when the last copy is destroyed. Collectives
// must be called by every rank in the same order with trees of the same
// structure, dtypes and shapes (checked: a DistError names the ranks that
// disagree). Not thread-safe: call a group's collectives from one thread.
class Group {
 public:
  // A world of one: collectives check their input and return it.
  Group();
  // Joins the group: blocks until every rank has joined and connected (to
  // each other, over TCP), or throws DistTimeoutError naming the ranks that
  // did not join within options.timeout.
  explicit Group(const Options& options);

  int rank() const;
  int world_size() const;
  const Options& options() const;
  const Stats& last_stats() const;

  // The mean over all ranks of each floating-point leaf (f32, f64, f16, bf16;
  // f16 and bf16 are summed in f32). None leaves stay None, statics come from `grads`.
  // Leaves of the same dtype class are packed into buckets of at most
  // Options::bucket_bytes (a large leaf spans several), read to the host,
  // reduced by Gloo on a communication thread while the next bucket is
  // staged, divided by world_size and written back as arrays on each leaf's
  // own device. Every rank gets bit-identical results. DTypeError naming the
  // path for integer or bool leaves; ValueError for tracers (call it outside
  // filter_jit / grad).
  template <class T>
  T all_reduce_mean(const T& grads) const {
    tree::Flat flat = tree::flatten(grads);
    std::vector<Array> out = all_reduce_mean_leaves(flat.def, flat.leaves);
    return tree::unflatten<T>(flat.def, out);
  }

  // Rank `root`'s leaves on every rank (any dtype), each on the receiving
  // rank's own leaf device; statics come from the local tree. Used to start
  // every rank from the same parameters.
  template <class T>
  T broadcast(const T& tree, int root = 0) const {
    tree::Flat flat = tree::flatten(tree);
    std::vector<Array> out = broadcast_leaves(flat.def, flat.leaves, root);
    return tree::unflatten<T>(flat.def, out);
  }

  // Returns when every rank has called barrier.
  void barrier() const;

  // What the templates above call: one leaf per array of `def`, in order.
  std::vector<Array> all_reduce_mean_leaves(const TreeDef& def,
                                            std::span<const Array> leaves) const;
  std::vector<Array> broadcast_leaves(const TreeDef& def, std::span<const Array> leaves,
                                      int root) const;

 private:
  std::shared_ptr<detail::GroupImpl> impl_;
};

// The group the environment describes (options_from_env()).
Group init();
// The group `options` describes.
Group init(const Options& options);

}  // namespace kiln::dist
