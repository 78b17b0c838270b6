// Tracing: while a Trace is active on this thread, every primitive binding is
// recorded into its Program instead of being run (all ops, also creation ops:
// "omnistaging"). Arrays produced inside are tracers: they have an aval and no data.
// Arrays from outside (concrete, or tracers of an enclosing trace) become the
// program's constants. Traces nest (grad of grad); the innermost one records.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kiln/dsl/program.hpp"

namespace kiln {

class Trace {
 public:
  // Becomes the active trace of this thread. `owner` names what traces (the
  // jitted function's name, "grad", "vmap", "scan body", ...): an error about
  // one of its tracers used after it ended says whose it was.
  explicit Trace(std::string_view owner = "a trace");
  ~Trace();  // deactivates (if finish() did not)
  Trace(const Trace&) = delete;
  Trace& operator=(const Trace&) = delete;

  // A new program input; returns the tracer standing for it.
  Array input(const Aval& aval, Device device, std::string name = {});
  // Records one binding (called by detail::bind while this trace is active).
  Array record(Prim p, const Params& params, std::span<const Array> inputs,
               Aval out);
  // Records a binding with several results (control flow; bind_multi).
  std::vector<Array> record_multi(Prim p, const Params& params, std::span<const Array> inputs,
                                  std::span<const Aval> outs);
  // Deactivates the trace and returns the program computing `outputs`.
  Program finish(std::span<const Array> outputs,
                 std::vector<std::string> output_names = {});

  std::uint64_t id() const { return id_; }

 private:
  // The value `a` stands for here: its own tracer's, or a new constant (a
  // concrete array, or a tracer of an enclosing trace); a tracer of a trace
  // that is not active is an error naming `op` and argument `arg` (kResult:
  // one of the traced function's results).
  static constexpr std::size_t kResult = static_cast<std::size_t>(-1);
  ValueId value_of(const Array& a, std::string_view op, std::size_t arg);

  std::uint64_t id_;
  Device device_;
  bool active_ = true;
  Program program_;
  // std::unordered_map, not Abseil's flat_hash_map: this header reaches every
  // program that includes kiln.hpp, and flat_hash_map.h alone cost ~0.35 s to parse.
  std::unordered_map<const ArrayImpl*, ValueId> constant_ids_;
};

// The innermost active trace of this thread, or nullptr (also while suspended).
Trace* current_trace();
// True when `a` is a tracer (of any trace).
bool is_tracer(const Array& a);

namespace detail {
// Throws ValueError for a tracer `a` used where its trace is not active (after
// its trace ended, on another thread, or in an eager op): "[op] <which> is a
// tracer of <owner>'s trace (made by <prim>), which is not active here ...".
// JAX's UnexpectedTracerError; never a crash.
[[noreturn]] void throw_escaped_tracer(std::string_view op, const Array& a,
                                       std::string_view which);
}  // namespace detail

// Runs ops eagerly inside its scope even if a trace is active (constant folding).
class SuspendTracing {
 public:
  SuspendTracing();
  ~SuspendTracing();
  SuspendTracing(const SuspendTracing&) = delete;
  SuspendTracing& operator=(const SuspendTracing&) = delete;
};

}  // namespace kiln
