// Primitives: the closed set of operations every backend implements. The public DSL
// (dsl/ops.hpp) validates arguments, computes the output Aval (the shape and dtype
// rule) and binds a primitive; tracing and autodiff will record the same bindings.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "kiln/runtime/array.hpp"

namespace kiln {

enum class Prim : std::uint8_t {
  // unary elementwise
  kNeg, kAbs, kExp, kLog, kTanh, kSqrt, kRsqrt, kSigmoid, kRelu, kLogicalNot,
  kBitwiseNot,  // i32/u32/bool
  // binary elementwise, numpy broadcasting (inputs already broadcast-compatible)
  kAdd, kSub, kMul, kDiv, kPow, kMaximum, kMinimum,
  kEq, kNe, kLt, kLe, kGt, kGe, kLogicalAnd, kLogicalOr,
  // bitwise (i32/u32; and/or/xor also bool); shifts by >= 32 give 0
  kBitwiseAnd, kBitwiseOr, kBitwiseXor, kShiftLeft, kShiftRightLogical,
  // where(cond, a, b), broadcasting
  kWhere,
  // dtype conversion (value-preserving); reinterpretation of the bits between
  // dtypes of one element size (params.dtype)
  kAstype, kBitcast,
  // reductions over params.axes (sorted, normalised), keepdims in params
  kSum, kMax, kMin,
  // index reductions over params.axis, result i32
  kArgmax, kArgmin,
  // batched matmul, numpy semantics after 1-D promotion (inputs are >= 2-D)
  kMatmul,
  // layout
  kReshape, kTranspose, kBroadcastTo, kConcatenate, kSlice,
  // indexing
  kTake, kTakeAlongAxis, kOneHot,
  // creation (no inputs)
  kFull, kArange,
  // identity whose gradient is zero
  kStopGradient,
};

enum class PrimFamily : std::uint8_t {
  kUnary, kBinary, kWhere, kAstype, kReduce, kArgReduce, kMatmul, kLayout,
  kIndex, kCreation, kIdentity
};

PrimFamily family(Prim p);
std::string_view name(Prim p);  // "add", "sum", ...

// Static parameters of a primitive binding. Unused fields keep their defaults, so
// two bindings are equal exactly when their parameters are.
struct Params {
  Axes axes;     // reductions: axes; transpose: permutation
  Shape shape;   // reshape/broadcast_to/full/arange: result shape
  Shape starts;  // slice: per-axis start (normalised, >= 0)
  Shape steps;   // slice: per-axis step (> 0); result extents are in `shape`
  std::int64_t axis = 0;   // concatenate, take, take_along_axis, argmax, one_hot
  std::int64_t depth = 0;  // one_hot
  bool keepdims = false;
  DType dtype = DType::kF32;  // astype/bitcast target, creation dtype
  double value = 0.0;         // full: fill value; arange: start
  double step = 1.0;          // arange: step
  Device device;              // creation ops: where to create
  // matmul: an operand is stored transposed in its last two axes. Set only by
  // the compiler's layout pass (dsl/program.cpp), never by the public op, so
  // autodiff never sees it.
  bool transpose_a = false;
  bool transpose_b = false;

  friend bool operator==(const Params&, const Params&) = default;
};

namespace detail {
// Binds `p` to `inputs` producing an array with aval `out`. Inside a trace the
// binding is recorded (dsl/trace.hpp); otherwise it runs now on the inputs'
// device (all inputs must share one device).
Array bind(Prim p, const Params& params, std::span<const Array> inputs,
           Aval out);
}  // namespace detail

}  // namespace kiln
