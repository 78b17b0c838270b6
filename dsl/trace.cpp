// The per-thread trace stack and recording of bindings.
#include "kiln/dsl/trace.hpp"

#include <array>
#include <atomic>
#include <mutex>

#include "kiln/dsl/primitive.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln {
namespace {

std::atomic<std::uint64_t> g_next_trace_id{1};
// nullptr entries are SuspendTracing scopes.
thread_local std::vector<Trace*> t_stack;

// Who owned the most recent traces, for the escaped-tracer message: a ring of
// (id, owner), so memory stays bounded however many traces a process makes.
struct Owners {
  static constexpr std::size_t kKept = 1024;
  std::mutex mu;
  std::array<std::pair<std::uint64_t, std::string>, kKept> ring;
  void add(std::uint64_t id, std::string_view owner) {
    std::lock_guard lock(mu);
    ring[id % kKept] = {id, std::string(owner)};
  }
  std::string find(std::uint64_t id) {
    std::lock_guard lock(mu);
    const auto& [kept, owner] = ring[id % kKept];
    return kept == id ? owner : std::string();
  }
};
Owners& owners() {
  static Owners* o = new Owners;  // never destroyed: traces may end during exit
  return *o;
}

bool active_here(std::uint64_t id) {
  for (const Trace* t : t_stack) {
    if (t != nullptr && t->id() == id) return true;
  }
  return false;
}

}  // namespace

namespace detail {
void throw_escaped_tracer(std::string_view op, const Array& a, std::string_view which) {
  const ArrayImpl& impl = *a.impl();
  std::string owner = owners().find(impl.trace_id);
  if (owner.empty()) owner = "a trace";
  const std::string made =
      impl.origin == 0 ? std::string("an input of it")
                       : str_cat("made by ", name(static_cast<Prim>(impl.origin - 1)));
  throw ValueError(str_cat(
      "[", op, "] ", which, " (", name(impl.aval.dtype), to_string(impl.aval.shape),
      ") is a tracer of ", owner, " (", made,
      ") used outside its trace: an array kept from inside grad, filter_jit, vmap or a loop "
      "body and used after it ended (or on another thread); return it from the traced "
      "function instead"));
}
}  // namespace detail

Trace* current_trace() { return t_stack.empty() ? nullptr : t_stack.back(); }

bool is_tracer(const Array& a) {
  return !a.is_null() && a.impl()->trace_id != 0;
}

SuspendTracing::SuspendTracing() { t_stack.push_back(nullptr); }
SuspendTracing::~SuspendTracing() { t_stack.pop_back(); }

Trace::Trace(std::string_view owner) : id_(g_next_trace_id++) {
  owners().add(id_, owner);
  t_stack.push_back(this);
}

Trace::~Trace() {
  if (active_ && !t_stack.empty() && t_stack.back() == this) t_stack.pop_back();
}

Array Trace::input(const Aval& aval, Device device, std::string name) {
  const ValueId v = program_.new_value(aval);
  program_.inputs.push_back(v);
  program_.input_names.push_back(std::move(name));
  return Array::tracer(aval, device, id_, v);
}

static_assert(kNumPrims < 255, "ArrayImpl::origin holds 1 + a Prim in 8 bits");

ValueId Trace::value_of(const Array& a, std::string_view op, std::size_t arg) {
  const std::uint64_t tid = a.impl()->trace_id;
  if (tid == id_) return a.impl()->value;
  if (tid != 0 && !active_here(tid)) {
    detail::throw_escaped_tracer(
        op, a, arg == kResult ? std::string("a result") : detail::str_cat("argument ", arg + 1));
  }
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
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    eq.inputs.push_back(value_of(inputs[i], name(p), i));
    device = inputs[i].device();
  }
  eq.output = program_.new_value(out);
  program_.equations.push_back(std::move(eq));
  return Array::tracer(std::move(out), device, id_, program_.equations.back().output,
                       static_cast<std::uint8_t>(static_cast<unsigned>(p) + 1));
}

std::vector<Array> Trace::record_multi(Prim p, const Params& params,
                                       std::span<const Array> inputs,
                                       std::span<const Aval> outs) {
  Equation eq{p, params, {}, 0};
  Device device = device_;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    eq.inputs.push_back(value_of(inputs[i], name(p), i));
    device = inputs[i].device();
  }
  std::vector<Array> results;
  for (std::size_t i = 0; i < outs.size(); ++i) {
    const ValueId v = program_.new_value(outs[i]);
    if (i == 0) {
      eq.output = v;
    } else {
      eq.more_outputs.push_back(v);
    }
    results.push_back(
        Array::tracer(outs[i], device, id_, v, static_cast<std::uint8_t>(static_cast<unsigned>(p) + 1)));
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
    program_.outputs.push_back(value_of(out, "trace", kResult));
  }
  output_names.resize(outputs.size());
  program_.output_names = std::move(output_names);
  t_stack.pop_back();
  active_ = false;
  return std::move(program_);
}

}  // namespace kiln
