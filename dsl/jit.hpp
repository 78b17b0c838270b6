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
#include <memory>
#include <string>
#include <type_traits>
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
  FusionOptions fusion = {};           // default: KILN_FUSION (on unless "0")
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
  std::unique_ptr<Executable> executable;
  TreeDef result;
  std::span<const Aval> avals_of(std::size_t arg) const {
    const auto [begin, end] = arg_range(first_leaf, arg, avals.size());
    return std::span<const Aval>(avals).subspan(begin, end - begin);
  }
};

// Per-thread scratch of the cache-hit path (reused between calls: no allocation).
std::vector<const Array*>& hit_scratch();

// The cache of one jitted function (shared by copies of the callable).
class JitState {
 public:
  explicit JitState(JitOptions options);
  ~JitState();

  // Finds or builds (tracing through `trace`) the entry for `call`, runs it and
  // returns the outputs and the result structure.
  std::pair<std::vector<Array>, const TreeDef*> call(JitCall& call, TraceFn trace);
  // The entry a call most likely hits (the last one used), or nullptr.
  const JitEntry* last_entry() const { return last_entry_; }
  // Runs `entry` on leaves that matched its key exactly (TreeMatcher: also
  // concrete, not donated, on the entry's device), donating those of the
  // arguments flagged in `donated`.
  void run_hit(const JitEntry& entry, std::span<const Array* const> leaves,
               std::span<const bool> donated, std::vector<Array>& outputs);

  std::size_t trace_count() const { return trace_count_; }
  std::size_t cache_size() const;
  void clear_cache();
  const std::string& last_retrace() const { return last_retrace_; }
  const RunStats& last_run() const { return last_run_; }
  const JitOptions& options() const { return options_; }
  void set_max_traces(std::size_t n) { max_traces_ = n; }
  // The executable of the most recently used entry (nullptr before a call).
  const Executable* last_executable() const;

 private:
  std::string arg_name(std::size_t i) const;
  // Every leaf's path, prefixed by its argument's name ("model.layers[0].weight").
  std::vector<std::string> leaf_paths(const JitCall& call) const;
  // The device of the call's leaves; DeviceError/ValueError naming the path of a
  // leaf on another device, donated, or a tracer.
  Device check_leaves(const JitCall& call) const;
  std::string explain_miss(const JitCall& call, Device device) const;
  JitEntry& trace_and_compile(JitCall& call, std::size_t hash, Device device, TraceFn trace);

  JitOptions options_;
  std::vector<std::unique_ptr<JitEntry>> entries_;
  const JitEntry* last_entry_ = nullptr;
  std::size_t trace_count_ = 0;
  std::size_t max_traces_ = static_cast<std::size_t>(-1);  // no limit
  bool log_retraces_ = false;  // KILN_LOG_RETRACES, read when the jit is made
  std::string last_retrace_;
  RunStats last_run_;
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

  template <class... Args>
  auto operator()(Args&&... args) const {
    constexpr bool kSelf = detail::Module<F>;
    using R = std::invoke_result_t<F&, const std::decay_t<Args>&...>;
    // Hit path: compare the arguments with the last entry's key in place.
    if (const detail::JitEntry* e = state_->last_entry()) {
      std::vector<const Array*>& leaves = detail::hit_scratch();
      leaves.clear();
      std::size_t i = 0;
      bool hit = true;
      if constexpr (kSelf) {
        hit = detail::matches(*f_, e->defs[i], e->avals_of(i), e->device, leaves);
        ++i;
      }
      hit = hit && e->defs.size() == sizeof...(Args) + kSelf &&
            ((detail::matches(args, e->defs[i], e->avals_of(i), e->device, leaves) && (++i, true)) && ...);
      if (hit) {
        constexpr bool kDonated[] = {false, !std::is_lvalue_reference_v<Args>...};
        std::vector<Array> outputs;
        state_->run_hit(*e, leaves,
                        std::span<const bool>(kDonated + !kSelf, sizeof...(Args) + kSelf), outputs);
        return tree::unflatten<R>(e->result, outputs);
      }
    }
    detail::JitCall call;
    call.defs.reserve(sizeof...(Args) + kSelf);
    if constexpr (kSelf) call.add(*f_, false);
    (call.add(args, !std::is_lvalue_reference_v<Args>), ...);
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
    auto [outputs, structure] = state_->call(call, trace);
    return tree::unflatten<R>(*structure, outputs);
  }

  // Number of times the function was traced (cache misses).
  std::size_t trace_count() const { return state_->trace_count(); }
  std::size_t cache_size() const { return state_->cache_size(); }
  void clear_cache() { state_->clear_cache(); }
  // Why the last trace happened: the argument path and what changed relative to
  // the nearest cached key ("first call" for the first trace).
  const std::string& last_retrace() const { return state_->last_retrace(); }
  // Launches, peak bytes held and in-place reuses of the last call.
  const RunStats& last_run() const { return state_->last_run(); }
  // The compiled program of the last call, with its kernel boundaries.
  std::string compiled_text() const {
    const Executable* e = state_->last_executable();
    return e == nullptr ? std::string() : e->to_string();
  }
  const F& function() const { return *f_; }
  detail::JitState& state() const { return *state_; }

 private:
  std::shared_ptr<F> f_;
  std::shared_ptr<detail::JitState> state_;
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
      : f_(std::move(f)), max_(max), count_(std::make_shared<std::size_t>(0)) {}
  template <class... Args>
  decltype(auto) operator()(Args&&... args) const {
    if (++*count_ > max_) {
      detail::throw_too_many_traces("the function", *count_, max_,
                                    detail::current_retrace_explanation());
    }
    return f_(std::forward<Args>(args)...);
  }
  std::size_t count() const { return *count_; }

 private:
  F f_;
  std::size_t max_;
  std::shared_ptr<std::size_t> count_;
};

// assert_max_traces(f, n): at most n traces. Works in both orders (seed 3):
//   filter_jit(debug::assert_max_traces(f, 1))   counts calls of f, i.e. traces
//   debug::assert_max_traces(filter_jit(f), 1)   limits the jit's own trace count
// Trace n+1 throws RetraceError naming the argument path and what changed, before
// anything is traced (jitted) or while tracing (function).
template <class F>
TraceCounter<F> assert_max_traces(F f, std::size_t max) {
  return TraceCounter<F>(std::move(f), max);
}
template <class F>
Jitted<F> assert_max_traces(Jitted<F> jitted, std::size_t max) {
  jitted.state().set_max_traces(max);
  return jitted;
}

}  // namespace debug
}  // namespace kiln
