// CPU kernel for batched matmul: one BLAS gemm per batch element, called
// directly on the arrays' buffers (cblas from OpenBLAS, the library
// xtensor-blas wraps), so no operand is copied. Broadcast batch dims are walked
// with stride 0 rather than materialised. f32 goes to oneDNN instead when kiln
// is built with it and KILN_GEMM=onednn (gemm.hpp).
#include <cblas.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "kiln/backends/cpu/cpu_backend.hpp"
#include "kiln/backends/cpu/gemm.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::cpu {

#ifdef KILN_HAVE_ONEDNN
constexpr bool kHaveOneDnn = true;
#else
constexpr bool kHaveOneDnn = false;
// Never called: gemm_lib() does not pick oneDNN in a build without it.
void onednn_sgemm(std::int64_t, std::int64_t, std::int64_t, const float*, const float*, float*,
                  bool, bool) {}
#endif

GemmLib gemm_lib() {
  static const GemmLib lib = [] {
    const char* env = std::getenv("KILN_GEMM");
    const std::string_view want = env != nullptr ? env : "";
    if (want.empty() || want == "openblas") return GemmLib::kOpenBlas;
    if (want == "onednn") {
      if (!kHaveOneDnn) {
        throw Error("KILN_GEMM=onednn: kiln was built without oneDNN (libdnnl-dev)");
      }
      return GemmLib::kOneDnn;
    }
    throw Error(detail::str_cat("KILN_GEMM=", want, ": expected openblas or onednn"));
  }();
  return lib;
}

namespace {

// C (m x n) = op(A) (m x k) * op(B) (k x n), row-major and contiguous; op
// transposes an operand stored transposed (A as k x m, B as n x k).
template <class T>
void gemm(std::int64_t m, std::int64_t n, std::int64_t k, const T* a, const T* b, T* c, bool ta,
          bool tb) {
  // BLAS rejects leading dimensions below 1 even when the matrix is empty.
  const auto lda = static_cast<blasint>(std::max<std::int64_t>(ta ? m : k, 1));
  const auto ldb = static_cast<blasint>(std::max<std::int64_t>(tb ? k : n, 1));
  const auto ldc = static_cast<blasint>(std::max<std::int64_t>(n, 1));
  const auto bm = static_cast<blasint>(m);
  const auto bn = static_cast<blasint>(n);
  const auto bk = static_cast<blasint>(k);
  const auto opa = ta ? CblasTrans : CblasNoTrans;
  const auto opb = tb ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>) {
    if (gemm_lib() == GemmLib::kOneDnn) {
      onednn_sgemm(m, n, k, a, b, c, ta, tb);
      return;
    }
    cblas_sgemm(CblasRowMajor, opa, opb, bm, bn, bk, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
  } else {
    cblas_dgemm(CblasRowMajor, opa, opb, bm, bn, bk, 1.0, a, lda, b, ldb, 0.0, c, ldc);
  }
}

// Per-batch-dim strides (in matrices) of an operand whose batch dims are
// right-aligned against `out_batch`; size-1 (broadcast) dims get stride 0.
Shape batch_strides(const Shape& shape, const Shape& out_batch) {
  const std::size_t rank = out_batch.size();
  const std::size_t own = shape.size() - 2;
  Shape strides(rank, 0);
  std::int64_t acc = 1;
  for (std::size_t i = 0; i < own; ++i) {
    const std::size_t d = own - 1 - i;  // own batch dim, innermost first
    if (shape[d] != 1) strides[rank - 1 - i] = acc;
    acc *= shape[d];
  }
  return strides;
}

template <class T>
void batched_matmul(const Array& a, const Array& b, const Aval& out, T* c, bool ta, bool tb) {
  const Shape& as = a.shape();
  const Shape& bs = b.shape();
  const std::int64_t m = out.shape[out.shape.size() - 2];
  const std::int64_t n = out.shape[out.shape.size() - 1];
  const std::int64_t k = as[as.size() - (ta ? 2 : 1)];
  const Shape out_batch(out.shape.begin(), out.shape.end() - 2);
  const std::int64_t batch = numel(out_batch);
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  if (k == 0) {  // an empty sum: BLAS may not write C at all
    std::fill_n(c, batch * m * n, T{0});
    return;
  }
  // A single shared right operand and an unbroadcast left one: the batch folds
  // into the rows of one large gemm, which BLAS runs far better than many
  // small.
  if (!ta && numel(Shape(bs.begin(), bs.end() - 2)) == 1 && a.size() == batch * m * k) {
    gemm<T>(batch * m, n, k, pa, pb, c, false, tb);
    return;
  }
  const Shape sa = batch_strides(as, out_batch);
  const Shape sb = batch_strides(bs, out_batch);
  const std::size_t rank = out_batch.size();
  Shape pos(rank, 0);
  std::int64_t off_a = 0;
  std::int64_t off_b = 0;
  for (std::int64_t i = 0; i < batch; ++i) {
    gemm<T>(m, n, k, pa + off_a * m * k, pb + off_b * k * n, c + i * m * n, ta, tb);
    for (std::size_t d = rank; d-- > 0;) {  // odometer over the batch index
      off_a += sa[d];
      off_b += sb[d];
      if (++pos[d] < out_batch[d]) break;
      off_a -= sa[d] * pos[d];
      off_b -= sb[d] * pos[d];
      pos[d] = 0;
    }
  }
}

}  // namespace

std::shared_ptr<Buffer> eval_matmul(Prim, const Params& params, std::span<const Array> inputs,
                                    const Aval& out) {
  const auto& q = params.as<MatmulParams>();
  auto buf = allocate(out);
  if (numel(out.shape) == 0) return buf;
  switch (out.dtype) {
    case DType::kF32:
      batched_matmul(inputs[0], inputs[1], out, static_cast<float*>(buf->host_data()),
                     q.transpose_a, q.transpose_b);
      break;
    case DType::kF64:
      batched_matmul(inputs[0], inputs[1], out, static_cast<double*>(buf->host_data()),
                     q.transpose_a, q.transpose_b);
      break;
    default:
      throw DTypeError(
          detail::str_cat("[matmul] the CPU backend has no kernel for ", name(out.dtype)));
  }
  return buf;
}

}  // namespace kiln::cpu
