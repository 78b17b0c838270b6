// CPU backend dispatch: routes each primitive to its family's kernels.
#include "kiln/backends/cpu/cpu_backend.hpp"

#include "kiln/backends/cpu/half.hpp"

namespace kiln::cpu {

std::shared_ptr<HostBuffer> allocate(const Aval& out) {
  return HostBuffer::allocate(numel(out.shape) * size_of(out.dtype));
}

// These families' handlers are one kernel each (where, argsort, matmul, the
// identity): a second primitive in one needs its own case there first.
static_assert(prims_in(PrimFamily::kWhere) == 1 && prims_in(PrimFamily::kSort) == 1 &&
                  prims_in(PrimFamily::kMatmul) == 1 && prims_in(PrimFamily::kIdentity) == 1,
              "a family the CPU backend handles with a single kernel grew a primitive");

std::shared_ptr<Buffer> CpuBackend::eval(Prim p, const Params& params,
                                         std::span<const Array> inputs,
                                         const Aval& out) {
  if (computes_in_f32(p, inputs, out)) return eval_in_f32(*this, p, params, inputs, out);
  switch (family(p)) {
    case PrimFamily::kUnary:
      return eval_unary(p, params, inputs, out);
    case PrimFamily::kBinary:
      return eval_binary(p, params, inputs, out);
    case PrimFamily::kWhere:
      return eval_where(p, params, inputs, out);
    case PrimFamily::kAstype:
      return eval_astype(p, params, inputs, out);
    case PrimFamily::kReduce:
      return eval_reduce(p, params, inputs, out);
    case PrimFamily::kArgReduce:
      return eval_arg_reduce(p, params, inputs, out);
    case PrimFamily::kMatmul:
      return eval_matmul(p, params, inputs, out);
    case PrimFamily::kLayout:
      return eval_layout(p, params, inputs, out);
    case PrimFamily::kWindow:
      return eval_window(p, params, inputs, out);
    case PrimFamily::kIndex:
      return eval_index(p, params, inputs, out);
    case PrimFamily::kScan:
      return eval_scan(p, params, inputs, out);
    case PrimFamily::kSort:
      return eval_sort(p, params, inputs, out);
    case PrimFamily::kCreation:
      return eval_creation(p, params, inputs, out);
    case PrimFamily::kIdentity:  // arrays are immutable: share the buffer
      return inputs[0].buffer();
    case PrimFamily::kControl:
      detail::control_reached_backend(p);
  }
  return nullptr;
}

}  // namespace kiln::cpu
