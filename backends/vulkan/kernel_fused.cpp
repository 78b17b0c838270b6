// Fused elementwise kernels: a FusedKernel (dsl/fusion.hpp) becomes one map
// kernel (kernel_map.cpp) with several outputs. Each invocation loads its
// element of every input through a broadcast view, runs every body equation's
// scalar code (emit_elementwise, the same one the single-op kernels use) on
// values in registers, and stores the body outputs; so intermediates never reach
// memory and an output may overwrite an input of the same shape (each element's
// inputs are loaded before its outputs are stored).
//
// Values keep the compute types of the single-op kernels (bool as bool, f16 as
// f32), and an f16 intermediate is rounded to f16 where the unfused program
// would have stored it, and float add/sub/mul/div results are NoContraction
// (a driver may not merge one with the next equation into an fma, which the
// unfused kernels cannot do either), so fused and unfused results agree bit for
// bit.
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
    key += detail::str_cat(name(eq.prim), "/", name(eq.params.dtype), "(",
                           detail::join(eq.inputs, ","), ")", eq.output, ":",
                           name(body.avals[eq.output].dtype), ";");
  }
  key += detail::str_cat("in=", detail::join(body.inputs, ","), ";out=",
                         detail::join(body.outputs, ","), "}");
  return key;
}

}  // namespace

Launch fused_kernel(Context& ctx, const FusedKernel& kernel) {
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
    std::vector<Val> args;
    for (const Equation& eq : body.equations) {
      args.clear();
      for (ValueId in : eq.inputs) args.push_back(value[in]);
      const DType in = body.avals[eq.inputs.back()].dtype;
      const DType out = body.avals[eq.output].dtype;
      Val r = emit_elementwise(b, eq.prim, eq.params, args, in, out);
      // Unfused, a product goes to memory before another kernel adds it: keep
      // drivers from fusing it into an fma with the next equation here.
      if (spv::is_float(r.ty) && (eq.prim == Prim::kAdd || eq.prim == Prim::kSub ||
                                  eq.prim == Prim::kMul || eq.prim == Prim::kDiv)) {
        b.no_contraction(r);
      }
      // Unfused, an f16 result is stored as f16: round it here the same way.
      if (out == DType::kF16 && eq.prim != Prim::kStopGradient) r = b.round_f16(r);
      value[eq.output] = r;
    }
    std::vector<Val> outs;
    for (ValueId v : body.outputs) outs.push_back(value[v]);
    return outs;
  };
  return map_kernel(ctx, std::move(spec));
}

}  // namespace kiln::vk
