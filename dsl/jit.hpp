// filter_jit: compile a function once per static structure of its arguments.
//
//   auto step = filter_jit([opt](MLP m, optim::State s, Array x, Array y) {...},
//                          {.name = "train_step", .arg_names = {"model", "state", "x", "y"}});
//   std::tie(model, state, loss) = step(std::move(model), std::move(state), x, y);
//
// On each call every argument is flattened (and the function itself, when it is
// a KILN_MODULE struct: its arrays are dynamic too). Array leaves are dynamic and
// keyed by dtype and shape; everything else (tree structure, None positions,
// static leaves) is static and keyed by hash, then ==. A miss traces the function
// with tracers for every array leaf, optimizes and compiles the program
// (dsl/executable.hpp) and stores it; a hit runs the stored executable. Static
// values are copied into the key (TreeDef), so mutating the caller's objects later
// cannot produce a stale hit. Arrays the function captures (closure state) are
// constants of the compiled program: capture by value, not by reference.
//
// Passing an argument as an rvalue (std::move) donates its arrays: the buffers
// of those the argument alone holds are handed to the call, which writes outputs
// of the same dtype and shape into them (in place), and the argument's arrays
// read as donated afterwards (a clear error on use). An array the caller can
// still reach some other way (a copy of the model, a view, the same array in a
// non-donated argument) is left alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <atomic>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/functional/function_ref.h"
#include "kiln/dsl/executable.hpp"
#include "kiln/runtime/tree.hpp"
#include "kiln/runtime/tree_match.hpp"

namespace kiln {

struct JitOptions {
  std::string name = "filter_jit";     // shown in errors and explanations
  std::vector<std::string> arg_names = {};  // default: arg0, arg1, ...
  FusionOptions fusion = {};           // default: KILN_FUSION (on unless "0"; README)
  // Most compiled entries kept for this function: past it the least recently
  // used is evicted (its program, kernels and memory freed) and a warning says
  // the function retraces too often, once. 0: KILN_JIT_CACHE_LIMIT, else 64.
  std::size_t max_entries = 0;
};

namespace detail {

// [begin, end) of argument `arg`'s leaves, given where each argument's leaves
// start and the total number of leaves.
inline std::pair<std::size_t, std::size_t> arg_range(std::span<const std::size_t> first_leaf,
                                                     std::size_t arg, std::size_t total) {
  return {first_leaf[arg], arg + 1 < first_leaf.size() ? first_leaf[arg + 1] : total};
}

// One call's flattened arguments.
struct JitCall {
  std::vector<TreeDef> defs;            // per argument
  absl::InlinedVector<bool, 8> donated;  // per argument (passed as an rvalue)
  std::vector<Array> leaves;            // every array leaf, argument by argument
  std::vector<std::size_t> first_leaf;  // per argument, index into leaves

  template <class T>
  void add(const T& value, bool donate) {
    tree::Flat flat = tree::flatten(value);
    first_leaf.push_back(leaves.size());
    leaves.insert(leaves.end(), std::make_move_iterator(flat.leaves.begin()),
                  std::make_move_iterator(flat.leaves.end()));
    defs.push_back(std::move(flat.def));
    donated.push_back(donate);
  }
  std::span<const Array> leaves_of(std::size_t arg, std::span<const Array> all) const {
    const auto [begin, end] = arg_range(first_leaf, arg, all.size());
    return all.subspan(begin, end - begin);
  }
};

// What the traced function returned: its array leaves and structure.
struct TraceResult {
  std::vector<Array> outputs;
  TreeDef structure;
};
using TraceFn = absl::FunctionRef<TraceResult(std::span<const Array> tracers)>;

// One compiled entry: its key (per-argument structures with their statics, leaf
// avals, device) and what it runs.
struct JitEntry {
  std::vector<TreeDef> defs;
  std::vector<std::size_t> first_leaf;  // per argument, index into avals
  std::vector<Aval> avals;
  Device device;
  std::size_t hash = 0;
  std::uint64_t epoch = 0;  // the cache's epoch when it was stored (JitState)
  // The cache's clock when it last ran (JitState::touch), for
  // least-recently-used eviction.
  mutable std::atomic<std::uint64_t> last_used{0};
  std::unique_ptr<Executable> executable;
  TreeDef result;
  std::span<const Aval> avals_of(std::size_t arg) const {
    const auto [begin, end] = arg_range(first_leaf, arg, avals.size());
    return std::span<const Aval>(avals).subspan(begin, end - begin);
  }
};

// Whether an argument passed as Arg&& donates its arrays: a non-const rvalue
// only (std::move of a const object leaves it with the caller).
template <class Arg>
inline constexpr bool kDonates =
    !std::is_lvalue_reference_v<Arg> && !std::is_const_v<std::remove_reference_t<Arg>>;

// Per-thread scratch of the cache-hit path (reused between calls: no allocation).
std::vector<const Array*>& hit_scratch();

// assert_max_traces around a jitted callable: at most `max` traces caused by the
// calls made through it (and its copies).
struct TraceGuard {
  explicit TraceGuard(std::size_t max) : max(max) {}
  std::size_t max;
  std::atomic<std::size_t> count{0};
};
using TraceGuards = std::vector<std::shared_ptr<TraceGuard>>;

// The cache of one jitted function (shared by copies of the callable).
//
// Threads: every member function may be called from any number of threads at
// once. Entries are immutable once stored and held by shared_ptr, so a call
// pins the entry it runs and runs it with no lock held. The hit path takes no
// lock: each thread remembers the entry it used last (hint()), checked against
// the cache's epoch so that nothing cleared is run. A miss looks the key up
// under a shared lock, then registers the key as pending under the exclusive
// one and traces with no lock held: threads missing on different keys trace in
// parallel, and a thread missing on a key another is tracing waits for that
// entry (two threads missing on the same key trace once).
class JitState {
 public:
  explicit JitState(JitOptions options);
  ~JitState();

  // Finds or builds (tracing through `trace`) the entry for `call`, runs it and
  // returns the outputs and the entry (which owns the result structure).
  std::pair<std::vector<Array>, std::shared_ptr<const JitEntry>> call(JitCall& call, TraceFn trace,
                                                                    const TraceGuards& guards);
  // The entry this thread used last on this cache, or null: what its next call
  // most likely hits.
  std::shared_ptr<const JitEntry> hint() const;
  // Runs `entry` on leaves that matched its key exactly (TreeMatcher: also
  // concrete, not donated, on the entry's device), donating those of the
  // arguments flagged in `donated`.
  void run_hit(const JitEntry& entry, std::span<const Array* const> leaves,
               std::span<const bool> donated, std::vector<Array>& outputs) const;

  std::size_t trace_count() const { return trace_count_.load(std::memory_order_relaxed); }
  std::size_t cache_size() const;
  // Entries evicted because the cache was full (max_entries).
  std::size_t eviction_count() const { return evictions_.load(std::memory_order_relaxed); }
  std::size_t max_entries() const { return max_entries_; }
  void clear_cache();
  std::string last_retrace() const;
  RunStats last_run() const;
  const JitOptions& options() const { return options_; }

 private:
  std::string arg_name(std::size_t i) const;
  // Every leaf's path, prefixed by its argument's name ("model.layers[0].weight").
  std::vector<std::string> leaf_paths(const JitCall& call) const;
  // The device of the call's leaves; DeviceError/ValueError naming the path of a
  // leaf on another device, donated, or a tracer.
  Device check_leaves(const JitCall& call) const;
  std::shared_ptr<const JitEntry> find(const JitCall& call, std::size_t hash, Device device) const;
  std::string explain_miss(const JitCall& call, Device device) const;
  // The entry for `call`: found, traced by another thread meanwhile (waited
  // for), or traced here.
  std::shared_ptr<const JitEntry> find_or_trace(JitCall& call, std::size_t hash, Device device,
                                                TraceFn trace, const TraceGuards& guards);
  std::shared_ptr<JitEntry> trace_and_compile(JitCall& call, const JitEntry& key, TraceFn trace,
                                              const TraceGuards& guards);
  struct Pending;
  // Ends `pending`: stores `entry` (null when the trace failed), wakes waiters.
  void finish(const std::shared_ptr<Pending>& pending, const std::shared_ptr<JitEntry>& entry);
  // This thread's record of this cache (created on first use).
  struct ThreadRecord;
  ThreadRecord& record() const;
  void remember(const std::shared_ptr<const JitEntry>& entry, const RunStats& stats) const;

  // Every stored entry (for explanations and eviction), under entries_mu_.
  std::vector<std::shared_ptr<const JitEntry>> all_entries() const;
  // Drops the least recently used entry (entries_mu_ held exclusively);
  // returns it, to be freed outside the lock.
  std::shared_ptr<const JitEntry> evict_one();
  void warn_evicting(const std::string& explanation) const;
  // Marks `e` as the most recently used (one relaxed fetch_add per call).
  void touch(const JitEntry& e) const {
    e.last_used.store(clock_.fetch_add(1, std::memory_order_relaxed) + 1,
                      std::memory_order_relaxed);
  }

  const JitOptions options_;
  const std::uint64_t id_;  // unique for the process's lifetime (thread records key on it)
  const bool log_retraces_;  // KILN_LOG_RETRACES, read when the jit is made
  const std::size_t max_entries_;
  mutable std::shared_mutex entries_mu_;
  // Entries by key hash (lookup does not grow with the number of entries). A
  // std::unordered_map (Abseil's flat_hash_map.h cost every program including
  // kiln.hpp ~0.35 s of parsing); the keys are hashes already (identity hash).
  std::unordered_map<std::size_t, absl::InlinedVector<std::shared_ptr<const JitEntry>, 1>>
      entries_;                                    // guarded by entries_mu_
  std::size_t entry_count_ = 0;                    // guarded by entries_mu_
  std::vector<std::shared_ptr<Pending>> pending_;  // guarded by entries_mu_
  mutable std::atomic<std::uint64_t> clock_{0};    // advanced by every run and store
  std::atomic<std::size_t> evictions_{0};
  std::atomic<bool> warned_{false};
  std::atomic<std::uint64_t> epoch_{0};  // bumped by clear_cache
  std::atomic<std::size_t> trace_count_{0};
  mutable std::mutex info_mu_;
  std::string last_retrace_;  // guarded by info_mu_
};

// The retrace explanation of the trace in progress on this thread ("" outside a
// filter_jit trace); what assert_max_traces reports when it wraps the function.
const std::string& current_retrace_explanation();
[[noreturn]] void throw_too_many_traces(std::string_view what, std::size_t count,
                                        std::size_t max, std::string_view explanation);

template <class T>
T unflatten_arg(const JitCall& call, std::size_t i, std::span<const Array> tracers) {
  return tree::unflatten<T>(call.defs[i], call.leaves_of(i, tracers));
}

}  // namespace detail

template <class F>
class Jitted {
 public:
  explicit Jitted(F f, JitOptions options = {})
      : f_(std::make_shared<F>(std::move(f))),
        state_(std::make_shared<detail::JitState>(std::move(options))) {}

  // Safe to call from many threads at once (see JitState).
  template <class... Args>
  auto operator()(Args&&... args) const {
    constexpr bool kSelf = detail::Module<F>;
    using R = std::invoke_result_t<F&, const std::decay_t<Args>&...>;
    // Hit path: compare the arguments with this thread's last entry in place.
    if (const std::shared_ptr<const detail::JitEntry> e = state_->hint()) {
      std::vector<const Array*>& leaves = detail::hit_scratch();
      leaves.clear();
      std::size_t i = 0;
      bool hit = true;
      if constexpr (kSelf) {
        hit = detail::matches(*f_, e->defs[i], e->avals_of(i), e->device, leaves);
        ++i;
      }
      // A call without arrays runs where the default device is (JAX keys on it
      // too); one with arrays, where they are (checked per leaf).
      hit = hit && e->defs.size() == sizeof...(Args) + kSelf &&
            (!e->avals.empty() || e->device == default_device()) &&
            ((detail::matches(args, e->defs[i], e->avals_of(i), e->device, leaves) && (++i, true)) && ...);
      if (hit) {
        constexpr bool kDonated[] = {false, detail::kDonates<Args>...};
        std::vector<Array> outputs;
        state_->run_hit(*e, leaves,
                        std::span<const bool>(kDonated + !kSelf, sizeof...(Args) + kSelf), outputs);
        return tree::unflatten<R>(e->result, outputs);
      }
    }
    detail::JitCall call;
    call.defs.reserve(sizeof...(Args) + kSelf);
    if constexpr (kSelf) call.add(*f_, false);
    (call.add(args, detail::kDonates<Args>), ...);
    auto trace = [&](std::span<const Array> tracers) {
      return [&]<std::size_t... I>(std::index_sequence<I...>) {
        const R result = [&]() -> R {
          if constexpr (kSelf) {
            const F self = detail::unflatten_arg<F>(call, 0, tracers);
            return self(detail::unflatten_arg<std::decay_t<Args>>(call, I + 1, tracers)...);
          } else {
            return (*f_)(detail::unflatten_arg<std::decay_t<Args>>(call, I, tracers)...);
          }
        }();
        tree::Flat flat = tree::flatten(result);
        return detail::TraceResult{std::move(flat.leaves), std::move(flat.def)};
      }(std::index_sequence_for<Args...>());
    };
    auto [outputs, entry] = state_->call(call, trace, guards_);
    return tree::unflatten<R>(entry->result, outputs);
  }

  // Number of times the function was traced (cache misses that compiled), by
  // every copy of this callable and from every thread.
  std::size_t trace_count() const { return state_->trace_count(); }
  std::size_t cache_size() const { return state_->cache_size(); }
  // Entries evicted because more than JitOptions::max_entries were compiled.
  std::size_t eviction_count() const { return state_->eviction_count(); }
  void clear_cache() { state_->clear_cache(); }
  // Why the last trace happened: the argument path and what changed relative to
  // the nearest cached key ("first call" for the first trace).
  std::string last_retrace() const { return state_->last_retrace(); }
  // Launches, peak bytes held and in-place reuses of the last call this thread
  // made (zeros before its first).
  RunStats last_run() const { return state_->last_run(); }
  // The compiled program of the last call this thread made, with its kernel
  // boundaries ("" before its first).
  std::string compiled_text() const {
    const std::shared_ptr<const detail::JitEntry> e = state_->hint();
    return e == nullptr ? std::string() : e->executable->to_string();
  }
  const F& function() const { return *f_; }
  detail::JitState& state() const { return *state_; }

  // A copy that shares this cache and also obeys `guard` (debug::assert_max_traces).
  Jitted guarded(std::shared_ptr<detail::TraceGuard> guard) const {
    Jitted copy = *this;
    copy.guards_.push_back(std::move(guard));
    return copy;
  }

 private:
  std::shared_ptr<F> f_;
  std::shared_ptr<detail::JitState> state_;
  detail::TraceGuards guards_;  // empty unless made by assert_max_traces
};

template <class F>
Jitted<F> filter_jit(F f, JitOptions options = {}) {
  return Jitted<F>(std::move(f), std::move(options));
}

namespace debug {

// Wraps a function so that calling it more than `max` times throws RetraceError.
// Around the function given to filter_jit, calls are traces, and the message
// carries the jit's retrace explanation. (Around a jitted callable, see below.)
template <class F>
class TraceCounter {
 public:
  TraceCounter(F f, std::size_t max)
      : f_(std::move(f)), max_(max), count_(std::make_shared<std::atomic<std::size_t>>(0)) {}
  template <class... Args>
  decltype(auto) operator()(Args&&... args) const {
    if (const std::size_t n = ++*count_; n > max_) {
      detail::throw_too_many_traces("the function", n, max_,
                                    detail::current_retrace_explanation());
    }
    return f_(std::forward<Args>(args)...);
  }
  std::size_t count() const { return count_->load(); }

 private:
  F f_;
  std::size_t max_;
  std::shared_ptr<std::atomic<std::size_t>> count_;
};

// assert_max_traces(f, n): at most n traces. Works in both orders (seed 3):
//   filter_jit(debug::assert_max_traces(f, 1))   counts calls of f, i.e. traces
//   debug::assert_max_traces(filter_jit(f), 1)   counts the traces its calls cause
// Trace n+1 throws RetraceError naming the argument path and what changed, before
// anything is traced (jitted) or while tracing (function).
//
// Around a jitted callable the result is a new callable: it shares the jit's
// cache (a key the original already compiled is a hit, not a trace) and counts
// only the traces that calls through it (or its copies) cause; the original is
// left untouched and never throws because of the guard. Guards stack: each
// limit holds.
template <class F>
TraceCounter<F> assert_max_traces(F f, std::size_t max) {
  return TraceCounter<F>(std::move(f), max);
}
template <class F>
Jitted<F> assert_max_traces(const Jitted<F>& jitted, std::size_t max) {
  return jitted.guarded(std::make_shared<detail::TraceGuard>(max));
}

}  // namespace debug
}  // namespace kiln
