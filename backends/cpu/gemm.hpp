// Which library runs the CPU backend's f32 GEMMs (KILN_GEMM): OpenBLAS by
// default, or oneDNN when kiln was built with it. oneDNN is ~10% faster on the
// MLP step's shapes on one thread, but Debian's build runs an OpenMP team that
// spins between calls and stalls the step on a busy machine, and a library
// cannot set OMP_WAIT_POLICY for its host (docs/PERFORMANCE.md), so it is
// opt-in. f64 always goes to OpenBLAS. One choice per process, so fused and
// unfused matmuls agree bit for bit.
#pragma once

#include <cstdint>

namespace kiln::cpu {

enum class GemmLib { kOpenBlas, kOneDnn };

// KILN_GEMM=openblas|onednn, read once; default OpenBLAS.
// Throws kiln::Error for an unknown name or onednn in a build without it.
GemmLib gemm_lib();

// C (m x n) = op(A) op(B), row-major and contiguous (A is k x m when ta, B is
// n x k when tb), through a oneDNN matmul primitive created on first use of the
// shape and cached. Only in builds with oneDNN (KILN_HAVE_ONEDNN).
void onednn_sgemm(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, const float* b,
                  float* c, bool ta, bool tb);

}  // namespace kiln::cpu
