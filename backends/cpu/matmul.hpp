// The CPU's batched matmul (matmul.cpp) as parts: its geometry, one product's
// GEMM and the way products are spread over the pool, shared with the
// implicit-GEMM kernels (implicit_gemm.cpp) so that a fused convolution runs
// exactly the products, and gets exactly the bits, of the unfused matmul.
// Internal to the CPU backend.
#pragma once

#include <cstdint>
#include <utility>

#include "absl/functional/function_ref.h"
#include "kiln/runtime/array.hpp"

namespace kiln::cpu {

// C (m x n) = op(A) (m x k) * op(B) (k x n), row-major and contiguous; op
// transposes an operand stored transposed (A as k x m, B as n x k). float
// goes to the library gemm_lib() picks, double to OpenBLAS.
template <class T>
void gemm(std::int64_t m, std::int64_t n, std::int64_t k, const T* a, const T* b, T* c, bool ta,
          bool tb);

// The products of a matmul of operands shaped `a` and `b` into `out`.
struct MatmulGeometry {
  std::int64_t m = 0, n = 0, k = 0;
  std::int64_t batch = 1;  // products
  bool ta = false, tb = false;
  Shape out_batch;   // the result's batch dims
  Shape sa, sb;      // per batch dim, each operand's stride in matrices (0: broadcast)
  bool fold_batch = false;  // one product of batch * m rows (see matmul.cpp)
  // Offsets, in matrices, of product i's A and B.
  std::pair<std::int64_t, std::int64_t> offsets(std::int64_t i) const;
};
MatmulGeometry matmul_geometry(const Shape& a, const Shape& b, const Shape& out, bool ta,
                               bool tb);

// Calls run(begin, end) for ranges of products that cover [0, g.batch), each
// range on one thread: over the pool when kiln's own f32 kernels run the
// products and the batch is big enough (each product then runs on one thread,
// with the bits of any other split), else once, on the calling thread (each
// product splits itself).
void for_each_product(const MatmulGeometry& g, DType dtype,
                      absl::FunctionRef<void(std::int64_t, std::int64_t)> run);

}  // namespace kiln::cpu
