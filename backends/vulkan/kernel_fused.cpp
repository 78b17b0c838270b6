// Fused kernels. An elementwise FusedKernel (dsl/fusion.hpp) becomes one map
// kernel (kernel_map.cpp) with several outputs; a matmul epilogue is the matmul
// kernel storing each product through the group, a reduction prologue the
// reduction kernel reading each element through the group (kernel_matmul.cpp,
// kernel_reduce.cpp, FusedPart). Each invocation of a map kernel loads its
// element of every input through a broadcast view, runs every body equation's
// scalar code (emit_elementwise, the same one the single-op kernels use) on
// values in registers, and stores the body outputs; so intermediates never reach
// memory and an output may overwrite an input of the same shape (each element's
// inputs are loaded before its outputs are stored).
//
// Values keep the compute types of the single-op kernels (bool as bool, f16 and
// bf16 as f32), and such an intermediate is rounded to its dtype where the unfused program
// would have stored it, and float add/sub/mul/div results are NoContraction
// (a driver may not merge one with the next equation into an fma, which the
// unfused kernels cannot do either), so fused and unfused results agree bit for
// bit.
#include <algorithm>

#include "kiln/backends/vulkan/context.hpp"
#include "kiln/backends/vulkan/kernels.hpp"
#include "kiln/dsl/fusion.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::vk {
namespace {

using spv::Builder;
using spv::Val;

// Identifies the body: equations over body value numbers, with the dtypes the
// kernel's text depends on (input dtypes and views are added by map_kernel).
std::string body_key(const Program& body) {
  std::string key = "fused{";
  for (const Equation& eq : body.equations) {
    key += detail::str_cat(name(eq.prim), cache_key(eq.params), "(",
                           detail::join(eq.inputs, ","), ")", eq.output, ":",
                           name(body.avals[eq.output].dtype), ";");
  }
  key += detail::str_cat("in=", detail::join(body.inputs, ","), ";out=",
                         detail::join(body.outputs, ","), "}");
  return key;
}

// Emits body equations [first, last) on `value` (inputs already set).
void emit_equations(Builder& b, const Program& body, std::size_t first, std::size_t last,
                    std::vector<Val>& value) {
  std::vector<Val> args;
  for (std::size_t e = first; e < last; ++e) {
    const Equation& eq = body.equations[e];
    args.clear();
    for (ValueId in : eq.inputs) args.push_back(value[in]);
    const DType in = body.avals[eq.inputs.back()].dtype;
    const DType out = body.avals[eq.output].dtype;
    // Unfused, a product goes to memory before another kernel adds it:
    // emit_elementwise's instructions are NoContraction (Builder::set_exact_float),
    // so no driver fuses it into an fma with the next equation here.
    Val r = emit_elementwise(b, eq.prim, eq.params, args, in, out);
    // Unfused, an f16 (bf16) result is stored as such: round it here the same way.
    if (eq.prim != Prim::kStopGradient) r = b.round_to(out, r);
    value[eq.output] = r;
  }
}

std::vector<Val> outputs_of(const Program& body, const std::vector<Val>& value) {
  std::vector<Val> outs;
  for (ValueId v : body.outputs) outs.push_back(value[v]);
  return outs;
}

bool reads(const Program& body, std::size_t first, ValueId v) {
  for (std::size_t e = first; e < body.equations.size(); ++e) {
    for (ValueId in : body.equations[e].inputs) {
      if (in == v) return true;
    }
  }
  return false;
}

Launch elementwise_kernel(Context& ctx, const FusedKernel& kernel, std::uint32_t addressed) {
  const Program& body = kernel.body;
  MapSpec spec;
  spec.domain = kernel.shape;
  for (ValueId v : body.inputs) {
    spec.inputs.push_back(body.avals[v].dtype);
    spec.views.push_back(broadcast_view(body.avals[v].shape, kernel.shape));
  }
  for (ValueId v : body.outputs) spec.outs.push_back(body.avals[v].dtype);
  spec.key = body_key(body);
  spec.multi_body = [&body](Builder& b, MapIndex& mi) {
    std::vector<Val> value(body.num_values());
    for (std::size_t i = 0; i < body.inputs.size(); ++i) value[body.inputs[i]] = mi.load(i);
    emit_equations(b, body, 0, body.equations.size(), value);
    return outputs_of(body, value);
  };
  return map_kernel(ctx, std::move(spec), addressed);
}

// matmul, then the group on each product as it is stored.
Launch epilogue_kernel(Context& ctx, const FusedKernel& kernel, std::uint32_t addressed) {
  const Program& body = kernel.body;
  const Equation& mm = body.equations.front();
  const std::vector<std::size_t> order = fused_inputs(kernel);
  MatmulSpec spec = matmul_spec(body.avals[mm.inputs[0]].shape, body.avals[mm.inputs[1]].shape,
                                body.avals[mm.output]);
  FusedPart part;
  for (std::size_t j = 2; j < order.size(); ++j) {
    const Aval& a = body.avals[body.inputs[order[j]]];
    part.inputs.push_back(a.dtype);
    part.views.push_back(broadcast_view(a.shape, kernel.shape));
  }
  for (ValueId v : body.outputs) part.outputs.push_back(body.avals[v].dtype);
  part.key = body_key(body);
  spec.fused = &part;
  spec.epilogue = [&](Builder& b, const Val& product, const LoadFn& load) {
    std::vector<Val> value(body.num_values());
    value[mm.output] = b.round_to(body.avals[mm.output].dtype, product);
    for (std::size_t j = 2; j < order.size(); ++j) value[body.inputs[order[j]]] = load(j - 2);
    emit_equations(b, body, 1, body.equations.size(), value);
    return outputs_of(body, value);
  };
  return matmul_kernel(ctx, spec, addressed);
}

// The group on each element as the reduction reads it.
Launch prologue_kernel(Context& ctx, const FusedKernel& kernel, std::uint32_t addressed) {
  const Program& body = kernel.body;
  const Equation& red = body.equations.back();
  const ValueId reduced = red.inputs[0];
  ReduceSpec spec = reduce_spec(red.prim, red.params, kernel.shape, body.avals[reduced].dtype,
                                body.avals[red.output].dtype);
  // Input views over (kept..., reduced...), the order reduce_spec walks.
  std::vector<std::size_t> perm;
  const Axes& axes = red.params.as<ReduceParams>().axes;
  for (bool want_reduced : {false, true}) {
    for (std::size_t d = 0; d < kernel.shape.size(); ++d) {
      const bool r = std::find(axes.begin(), axes.end(), static_cast<std::int64_t>(d)) != axes.end();
      if (r == want_reduced) perm.push_back(d);
    }
  }
  FusedPart part;
  for (ValueId v : body.inputs) {
    const View full = broadcast_view(body.avals[v].shape, kernel.shape);
    View w;
    for (std::size_t d : perm) w.strides.push_back(full.strides[d]);
    part.inputs.push_back(body.avals[v].dtype);
    part.views.push_back(std::move(w));
  }
  for (std::size_t o = 0; o + 1 < body.outputs.size(); ++o) {
    part.outputs.push_back(body.avals[body.outputs[o]].dtype);
  }
  part.key = body_key(body);
  spec.fused = &part;
  spec.prologue = [&](Builder& b, const LoadFn& load) {
    std::vector<Val> value(body.num_values());
    for (std::size_t i = 0; i < body.inputs.size(); ++i) value[body.inputs[i]] = load(i);
    emit_equations(b, body, 0, body.equations.size() - 1, value);
    std::vector<Val> results{value[reduced]};
    for (std::size_t o = 0; o + 1 < body.outputs.size(); ++o) {
      results.push_back(value[body.outputs[o]]);
    }
    return results;
  };
  return reduce_kernel(ctx, spec, addressed);
}

}  // namespace

std::vector<std::size_t> fused_inputs(const FusedKernel& kernel) {
  const Program& body = kernel.body;
  std::vector<std::size_t> order;
  if (kernel.kind != FusedKernel::Kind::kMatmulEpilogue) {
    for (std::size_t i = 0; i < body.inputs.size(); ++i) order.push_back(i);
    return order;
  }
  // The matmul's operands, then the inputs the epilogue reads (an operand the
  // epilogue reads too is bound twice).
  const Equation& mm = body.equations.front();
  const auto position = [&](ValueId v) {
    return static_cast<std::size_t>(std::find(body.inputs.begin(), body.inputs.end(), v) -
                                    body.inputs.begin());
  };
  order = {position(mm.inputs[0]), position(mm.inputs[1])};
  for (std::size_t i = 0; i < body.inputs.size(); ++i) {
    if (reads(body, 1, body.inputs[i])) order.push_back(i);
  }
  return order;
}

Launch fused_kernel(Context& ctx, const FusedKernel& kernel, std::uint32_t addressed) {
  switch (kernel.kind) {
    case FusedKernel::Kind::kMatmulEpilogue:
      return epilogue_kernel(ctx, kernel, addressed);
    case FusedKernel::Kind::kReducePrologue:
      return prologue_kernel(ctx, kernel, addressed);
    case FusedKernel::Kind::kUnfoldMatmul:
    case FusedKernel::Kind::kMatmulFold:
      // plan_fused runs these unfused (Backend::eval_fused).
      throw Error(detail::str_cat("[fused] no Vulkan kernel for a ", name(kernel.kind), " kernel"));
    case FusedKernel::Kind::kElementwise:
      break;
  }
  return elementwise_kernel(ctx, kernel, addressed);
}

}  // namespace kiln::vk
