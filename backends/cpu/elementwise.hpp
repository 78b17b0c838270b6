// Flat elementwise kernels: one primitive over `n` elements whose operands are
// contiguous runs or broadcast scalars. They are the one definition of each
// elementwise op's CPU semantics (elementwise.cpp says which): the unfused
// kernels (eval_unary, eval_binary, ...) run them over whole arrays or output
// rows, the fused kernels (fused.cpp) over cache-sized chunks of temporaries.
// Internal to the CPU backend. Element types are the host ones, bool as its 0/1
// byte; f16 has none (check_host_dtype refuses it first).
#pragma once

#include <cstddef>

#include "kiln/dsl/primitive.hpp"

namespace kiln::cpu {

// An operand: `data` holds n elements, or one element read for all of them.
struct FlatOperand {
  const void* data = nullptr;
  bool scalar = false;
};

// One elementwise primitive over n elements: operands `in` (1 for unary and
// astype, 2 for binary, 3 for where), result `out`.
using FlatKernel = void (*)(const FlatOperand* in, void* out, std::size_t n);

// The kernel of elementwise primitive `p` on operands of dtype `in` giving `out`
// (for where, `in` is the values' dtype): the SIMD one where simd.hpp has it,
// else the generic one. The *_flat functions below call it; the fused kernels
// resolve it once per equation. Throws DTypeError for f16 and bf16, except
// astype between them and f32 (half_astype_kernel).
FlatKernel flat_kernel(Prim p, DType in, DType out);

// The portable (xtensor, element by element) kernel of `p`, whatever the SIMD
// level: the reference tests/test_simd_levels.cpp holds every level's kernels
// to. Throws for where (SIMD at every level) and dtypes it has no kernel for.
FlatKernel reference_kernel(Prim p, DType in, DType out);

// Unary primitives (neg, abs, exp, ..., bitwise_not) on `dtype` elements.
void unary_flat(Prim p, DType dtype, const void* x, void* out, std::size_t n);
// Binary primitives; `in` is the operands' dtype (comparisons write bool bytes).
void binary_flat(Prim p, DType in, FlatOperand a, FlatOperand b, void* out,
                 std::size_t n);
// where(c, a, b): c is bool bytes, a and b (and out) have `dtype`.
void where_flat(DType dtype, FlatOperand c, FlatOperand a, FlatOperand b,
                void* out, std::size_t n);
// astype (value conversion; bitcast moves no element and is the caller's).
void astype_flat(DType from, DType to, const void* x, void* out, std::size_t n);

// Throws the CPU backend's DTypeError for f16 operands of `p`.
void check_host_dtype(Prim p, DType d);

}  // namespace kiln::cpu
