// Binding a primitive: record it into the active trace, or run it now.
#include "kiln/dsl/primitive.hpp"

#include "kiln/dsl/backend.hpp"
#include "kiln/dsl/check.hpp"
#include "kiln/dsl/trace.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln {

namespace detail {

void check_not_none(std::string_view op, const Array& a, std::string_view which) {
  if (a.is_null()) {
    throw ValueError(str_cat("[", op, "] ", which,
                             " is None (a null Array; a field left out of its struct's "
                             "KILN_MODULE(...) is None after grad or filter_jit)"));
  }
}

void not_in_family(Prim p, PrimFamily f) {
  throw Error(str_cat("[kiln internal] ", name(p), " dispatched to the handler of family #",
                      static_cast<int>(f), ", which is not its own"));
}

void not_a_prim(Prim p) {
  throw Error(str_cat("[kiln internal] ", static_cast<int>(p), " is not a primitive"));
}

void check_bind_inputs(Prim p, std::span<const Array> inputs, bool tracing) {
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].is_donated()) {
      check_not_donated(name(p), inputs[i], str_cat("argument ", i + 1));
    }
    // Eager: no tracer may be an input (inside a trace, record() checks that
    // a tracer's trace is active on this thread).
    if (!tracing && is_tracer(inputs[i])) {
      throw_escaped_tracer(name(p), inputs[i], str_cat("argument ", i + 1));
    }
  }
}

Device eager_device(Prim p, std::span<const Array> inputs, Device otherwise) {
  if (inputs.empty()) return otherwise;
  const Device device = inputs[0].device();
  for (const Array& in : inputs.subspan(1)) {
    if (in.device() != device) {
      throw DeviceError(str_cat("[", name(p), "] inputs live on different devices: ",
                                device.to_string(), " and ", in.device().to_string(),
                                "; move one with to_device()"));
    }
  }
  return device;
}

Array bind(Prim p, const Params& params, std::span<const Array> inputs,
           Aval out) {
  if (params.index() != info(p).params) detail::wrong_params(params.index(), info(p).params);
  // Every result shape (a user's for creation and layout ops, or one computed
  // from inputs) is checked here, before a backend sizes a buffer from it.
  check_shape(name(p), out.shape, size_of(out.dtype));
  Trace* trace = current_trace();
  check_bind_inputs(p, inputs, trace != nullptr);
  if (trace != nullptr) return trace->record(p, params, inputs, std::move(out));
  const Device* made_on = creation_device(params);
  const Device device = eager_device(p, inputs, made_on != nullptr ? *made_on : Device{});
  auto buffer = backend_for(device).eval(p, params, inputs, out);
  return Array(out.dtype, std::move(out.shape), std::move(buffer));
}

}  // namespace detail
}  // namespace kiln
