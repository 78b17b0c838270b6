// CPU kernel for batched matmul: one BLAS gemm per batch element, called
// directly on the arrays' buffers (cblas from OpenBLAS, the library
// xtensor-blas wraps), so no operand is copied. Its parts (matmul.hpp) also run
// the implicit-GEMM kernels' products. Broadcast batch dims are walked
// with stride 0 rather than materialised. f32 goes to kiln's own kernels by
// default (gemm_kernels.cpp), or to the library KILN_GEMM names (gemm.hpp).
#include <cblas.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>
#include <utility>

#include "kiln/backends/cpu/cpu_backend.hpp"
#include "kiln/backends/cpu/gemm.hpp"
#include "kiln/backends/cpu/matmul.hpp"
#include "kiln/backends/cpu/simd.hpp"
#include "kiln/runtime/env.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"
#include "kiln/runtime/thread_pool.hpp"

namespace kiln::cpu {

#ifdef KILN_HAVE_ONEDNN
constexpr bool kHaveOneDnn = true;
#else
constexpr bool kHaveOneDnn = false;
// Never called: gemm_lib() does not pick oneDNN in a build without it.
void onednn_sgemm(std::int64_t, std::int64_t, std::int64_t, const float*, const float*, float*,
                  bool, bool) {}
#endif

Sgemm kiln_sgemm() {
#if defined(__x86_64__)
  switch (active_isa()) {
    case Isa::kX86V4: return &isa_x86_v4::sgemm;
    case Isa::kX86V3: return &isa_x86_v3::sgemm;
    default: break;
  }
#endif
  return nullptr;
}

GemmLib gemm_lib() {
  static const GemmLib lib = [] {
    const std::optional<std::string> env = detail::env::choice("KILN_GEMM");
    const std::string_view want = env ? std::string_view(*env) : std::string_view();
    if (want.empty()) return kiln_sgemm() != nullptr ? GemmLib::kKiln : GemmLib::kOpenBlas;
    if (want == "kiln") {
      if (kiln_sgemm() == nullptr) {
        throw Error(detail::str_cat("KILN_GEMM=kiln: kiln's GEMM kernels need x86-64-v3 (AVX2 "
                                    "and FMA) or x86-64-v4; the SIMD level in use is ",
                                    isa_name(active_isa())));
      }
      return GemmLib::kKiln;
    }
    if (want == "openblas") return GemmLib::kOpenBlas;
    if (want == "onednn") {
      if (!kHaveOneDnn) {
        throw Error("KILN_GEMM=onednn: kiln was built without oneDNN (libdnnl-dev)");
      }
      return GemmLib::kOneDnn;
    }
    throw Error(detail::str_cat("KILN_GEMM=", want, ": expected kiln, openblas or onednn"));
  }();
  return lib;
}

std::string gemm_name() {
  switch (gemm_lib()) {
#if defined(__x86_64__)
    case GemmLib::kKiln:
      return active_isa() == Isa::kX86V4 ? isa_x86_v4::sgemm_name() : isa_x86_v3::sgemm_name();
#endif
    case GemmLib::kOneDnn: return "oneDNN";
    default: break;
  }
  return detail::str_cat("OpenBLAS ", openblas_get_config(), " (", openblas_get_corename(),
                         " kernels)");
}

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
    switch (gemm_lib()) {
      case GemmLib::kKiln: kiln_sgemm()(m, n, k, a, b, c, ta, tb); return;
      case GemmLib::kOneDnn: onednn_sgemm(m, n, k, a, b, c, ta, tb); return;
      case GemmLib::kOpenBlas: break;
    }
    cblas_sgemm(CblasRowMajor, opa, opb, bm, bn, bk, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
  } else {
    cblas_dgemm(CblasRowMajor, opa, opb, bm, bn, bk, 1.0, a, lda, b, ldb, 0.0, c, ldc);
  }
}
template void gemm(std::int64_t, std::int64_t, std::int64_t, const float*, const float*, float*,
                   bool, bool);
template void gemm(std::int64_t, std::int64_t, std::int64_t, const double*, const double*,
                   double*, bool, bool);

namespace {

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

}  // namespace

MatmulGeometry matmul_geometry(const Shape& as, const Shape& bs, const Shape& out, bool ta,
                               bool tb) {
  MatmulGeometry g;
  g.m = out[out.size() - 2];
  g.n = out[out.size() - 1];
  g.k = as[as.size() - (ta ? 2 : 1)];
  g.ta = ta;
  g.tb = tb;
  g.out_batch.assign(out.begin(), out.end() - 2);
  g.batch = numel(g.out_batch);
  g.sa = batch_strides(as, g.out_batch);
  g.sb = batch_strides(bs, g.out_batch);
  // A single shared right operand and an unbroadcast left one: the batch folds
  // into the rows of one large gemm, which BLAS runs far better than many
  // small.
  g.fold_batch = !ta && numel(Shape(bs.begin(), bs.end() - 2)) == 1 &&
                 numel(Shape(as.begin(), as.end() - 2)) == g.batch;
  return g;
}

std::pair<std::int64_t, std::int64_t> MatmulGeometry::offsets(std::int64_t i) const {
  std::int64_t off_a = 0, off_b = 0;
  for (std::size_t d = out_batch.size(); d-- > 0;) {
    const std::int64_t pos = i % out_batch[d];
    i /= out_batch[d];
    off_a += pos * sa[d];
    off_b += pos * sb[d];
  }
  return {off_a, off_b};
}

void for_each_product(const MatmulGeometry& g, DType dtype,
                      absl::FunctionRef<void(std::int64_t, std::int64_t)> run) {
  // kiln's kernels run on kiln's pool: a batch of small products is split by
  // matrix (each one's bits are those of a one-thread run, see gemm.hpp), in
  // ranges small enough to balance a thread that the machine runs slower.
  if (dtype == DType::kF32 && gemm_lib() == GemmLib::kKiln && g.batch > 1 &&
      g.batch * g.m * g.n * g.k >= (std::int64_t{1} << 18)) {
    const std::int64_t tasks = std::min<std::int64_t>(g.batch, 16 * num_threads());
    parallel_for(static_cast<std::size_t>(tasks), [&](std::size_t t) {
      const auto i = static_cast<std::int64_t>(t);
      run(g.batch * i / tasks, g.batch * (i + 1) / tasks);
    });
    return;
  }
  run(0, g.batch);
}

namespace {

template <class T>
void batched_matmul(const Array& a, const Array& b, const Aval& out, T* c, bool ta, bool tb) {
  const MatmulGeometry g = matmul_geometry(a.shape(), b.shape(), out.shape, ta, tb);
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  if (g.k == 0) {  // an empty sum: BLAS may not write C at all
    std::fill_n(c, g.batch * g.m * g.n, T{0});
    return;
  }
  if (g.fold_batch) {
    gemm<T>(g.batch * g.m, g.n, g.k, pa, pb, c, false, tb);
    return;
  }
  for_each_product(g, out.dtype, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const auto [off_a, off_b] = g.offsets(i);
      gemm<T>(g.m, g.n, g.k, pa + off_a * g.m * g.k, pb + off_b * g.k * g.n, c + i * g.m * g.n,
              ta, tb);
    }
  });
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
