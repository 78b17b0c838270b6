// Primitive names and families.
#include "kiln/dsl/primitive.hpp"

#include "kiln/dsl/backend.hpp"
#include "kiln/dsl/check.hpp"
#include "kiln/dsl/trace.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln {

PrimFamily family(Prim p) {
  switch (p) {
    case Prim::kNeg: case Prim::kAbs: case Prim::kExp: case Prim::kLog:
    case Prim::kTanh: case Prim::kSqrt: case Prim::kRsqrt: case Prim::kSigmoid:
    case Prim::kRelu: case Prim::kLogicalNot: case Prim::kBitwiseNot:
      return PrimFamily::kUnary;
    case Prim::kAdd: case Prim::kSub: case Prim::kMul: case Prim::kDiv:
    case Prim::kPow: case Prim::kMaximum: case Prim::kMinimum: case Prim::kEq:
    case Prim::kNe: case Prim::kLt: case Prim::kLe: case Prim::kGt: case Prim::kGe:
    case Prim::kLogicalAnd: case Prim::kLogicalOr: case Prim::kBitwiseAnd:
    case Prim::kBitwiseOr: case Prim::kBitwiseXor: case Prim::kShiftLeft:
    case Prim::kShiftRightLogical:
      return PrimFamily::kBinary;
    case Prim::kWhere:
      return PrimFamily::kWhere;
    case Prim::kAstype: case Prim::kBitcast:
      return PrimFamily::kAstype;
    case Prim::kSum: case Prim::kMax: case Prim::kMin:
      return PrimFamily::kReduce;
    case Prim::kArgmax: case Prim::kArgmin:
      return PrimFamily::kArgReduce;
    case Prim::kMatmul:
      return PrimFamily::kMatmul;
    case Prim::kReshape: case Prim::kTranspose: case Prim::kBroadcastTo:
    case Prim::kConcatenate: case Prim::kSlice:
      return PrimFamily::kLayout;
    case Prim::kTake: case Prim::kTakeAlongAxis: case Prim::kOneHot:
      return PrimFamily::kIndex;
    case Prim::kFull: case Prim::kArange:
      return PrimFamily::kCreation;
    case Prim::kStopGradient:
      return PrimFamily::kIdentity;
  }
  return PrimFamily::kUnary;
}

std::string_view name(Prim p) {
  switch (p) {
    case Prim::kNeg: return "neg";
    case Prim::kAbs: return "abs";
    case Prim::kExp: return "exp";
    case Prim::kLog: return "log";
    case Prim::kTanh: return "tanh";
    case Prim::kSqrt: return "sqrt";
    case Prim::kRsqrt: return "rsqrt";
    case Prim::kSigmoid: return "sigmoid";
    case Prim::kRelu: return "relu";
    case Prim::kLogicalNot: return "logical_not";
    case Prim::kBitwiseNot: return "bitwise_not";
    case Prim::kAdd: return "add";
    case Prim::kSub: return "subtract";
    case Prim::kMul: return "multiply";
    case Prim::kDiv: return "divide";
    case Prim::kPow: return "power";
    case Prim::kMaximum: return "maximum";
    case Prim::kMinimum: return "minimum";
    case Prim::kEq: return "equal";
    case Prim::kNe: return "not_equal";
    case Prim::kLt: return "less";
    case Prim::kLe: return "less_equal";
    case Prim::kGt: return "greater";
    case Prim::kGe: return "greater_equal";
    case Prim::kLogicalAnd: return "logical_and";
    case Prim::kLogicalOr: return "logical_or";
    case Prim::kBitwiseAnd: return "bitwise_and";
    case Prim::kBitwiseOr: return "bitwise_or";
    case Prim::kBitwiseXor: return "bitwise_xor";
    case Prim::kShiftLeft: return "shift_left";
    case Prim::kShiftRightLogical: return "shift_right_logical";
    case Prim::kWhere: return "where";
    case Prim::kAstype: return "astype";
    case Prim::kBitcast: return "bitcast";
    case Prim::kSum: return "sum";
    case Prim::kMax: return "max";
    case Prim::kMin: return "min";
    case Prim::kArgmax: return "argmax";
    case Prim::kArgmin: return "argmin";
    case Prim::kMatmul: return "matmul";
    case Prim::kReshape: return "reshape";
    case Prim::kTranspose: return "transpose";
    case Prim::kBroadcastTo: return "broadcast_to";
    case Prim::kConcatenate: return "concatenate";
    case Prim::kSlice: return "slice";
    case Prim::kTake: return "take";
    case Prim::kTakeAlongAxis: return "take_along_axis";
    case Prim::kOneHot: return "one_hot";
    case Prim::kFull: return "full";
    case Prim::kArange: return "arange";
    case Prim::kStopGradient: return "stop_gradient";
  }
  return "?";
}

namespace detail {

void check_not_none(std::string_view op, const Array& a, std::string_view which) {
  if (a.is_null()) {
    throw ValueError(str_cat("[", op, "] ", which,
                             " is None (a null Array; a field left out of its struct's "
                             "KILN_MODULE(...) is None after grad or filter_jit)"));
  }
}

Array bind(Prim p, const Params& params, std::span<const Array> inputs,
           Aval out) {
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].is_donated()) {
      check_not_donated(name(p), inputs[i], str_cat("argument ", i + 1));
    }
  }
  if (Trace* trace = current_trace()) {
    return trace->record(p, params, inputs, std::move(out));
  }
  Device device = params.device;
  if (!inputs.empty()) {
    device = inputs[0].device();
    for (const Array& in : inputs.subspan(1)) {
      if (in.device() != device) {
        throw DeviceError(detail::str_cat("[", name(p), "] inputs live on different devices: ",
                                       device.to_string(), " and ",
                                       in.device().to_string(),
                                       "; move one with to_device()"));
      }
    }
  }
  auto buffer = backend_for(device).eval(p, params, inputs, out);
  return Array(out.dtype, std::move(out.shape), std::move(buffer));
}

}  // namespace detail
}  // namespace kiln
