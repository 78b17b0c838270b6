// The per-thread trace stack and recording of bindings.
#include "kiln/dsl/trace.hpp"

#include <atomic>

#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln {
namespace {

std::atomic<std::uint64_t> g_next_trace_id{1};
// nullptr entries are SuspendTracing scopes.
thread_local std::vector<Trace*> t_stack;

}  // namespace

Trace* current_trace() { return t_stack.empty() ? nullptr : t_stack.back(); }

bool is_tracer(const Array& a) {
  return !a.is_null() && a.impl()->trace_id != 0;
}

SuspendTracing::SuspendTracing() { t_stack.push_back(nullptr); }
SuspendTracing::~SuspendTracing() { t_stack.pop_back(); }

Trace::Trace() : id_(g_next_trace_id++) { t_stack.push_back(this); }

Trace::~Trace() {
  if (active_ && !t_stack.empty() && t_stack.back() == this) t_stack.pop_back();
}

Array Trace::input(const Aval& aval, Device device, std::string name) {
  const ValueId v = program_.new_value(aval);
  program_.inputs.push_back(v);
  program_.input_names.push_back(std::move(name));
  return Array::tracer(aval, device, id_, v);
}

ValueId Trace::value_of(const Array& a) {
  if (a.impl()->trace_id == id_) return a.impl()->value;
  // Anything else is a constant of this program: a concrete array, or a tracer of
  // an enclosing trace (re-bound into that trace when this program is evaluated).
  auto [it, inserted] = constant_ids_.try_emplace(a.impl(), 0);
  if (inserted) {
    it->second = program_.new_value(a.aval());
    program_.constants.push_back(it->second);
    program_.constant_values.push_back(a);
  }
  return it->second;
}

Array Trace::record(Prim p, const Params& params, std::span<const Array> inputs,
                    Aval out) {
  Equation eq{p, params, {}, 0};
  const Device* made_on = creation_device(params);
  Device device = made_on != nullptr ? *made_on : Device{};
  for (const Array& in : inputs) {
    eq.inputs.push_back(value_of(in));
    device = in.device();
  }
  eq.output = program_.new_value(out);
  program_.equations.push_back(std::move(eq));
  return Array::tracer(std::move(out), device, id_, program_.equations.back().output);
}

std::vector<Array> Trace::record_multi(Prim p, const Params& params,
                                       std::span<const Array> inputs,
                                       std::span<const Aval> outs) {
  Equation eq{p, params, {}, 0};
  Device device = device_;
  for (const Array& in : inputs) {
    eq.inputs.push_back(value_of(in));
    device = in.device();
  }
  std::vector<Array> results;
  for (std::size_t i = 0; i < outs.size(); ++i) {
    const ValueId v = program_.new_value(outs[i]);
    if (i == 0) {
      eq.output = v;
    } else {
      eq.more_outputs.push_back(v);
    }
    results.push_back(Array::tracer(outs[i], device, id_, v));
  }
  program_.equations.push_back(std::move(eq));
  return results;
}

Program Trace::finish(std::span<const Array> outputs,
                      std::vector<std::string> output_names) {
  if (!active_ || t_stack.empty() || t_stack.back() != this) {
    throw Error("[trace] finish() called on a trace that is not the innermost active one");
  }
  for (const Array& out : outputs) {
    if (out.is_null()) throw ValueError("[trace] a traced function returned a null Array (None)");
    program_.outputs.push_back(value_of(out));
  }
  output_names.resize(outputs.size());
  program_.output_names = std::move(output_names);
  t_stack.pop_back();
  active_ = false;
  return std::move(program_);
}

}  // namespace kiln
