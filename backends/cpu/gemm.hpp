// Which code runs the CPU backend's f32 GEMMs (KILN_GEMM): kiln's own kernels
// (gemm_kernels.cpp) by default where the SIMD level has FMA (x86-64-v3 and
// up), else OpenBLAS; oneDNN when kiln was built with it and asked for. kiln's
// kernels pick their code from CPUID like the elementwise ones (simd.hpp), so
// the speed of a step does not depend on whether OpenBLAS's CPU table knows the
// machine, and they split work over kiln's own thread pool (no second pool
// spinning next to it). Debian's oneDNN runs an OpenMP team that spins between
// calls and stalls the step on a busy machine, and a library cannot set
// OMP_WAIT_POLICY for its host (docs/PERFORMANCE.md), so it stays opt-in. f64
// always goes to OpenBLAS. One choice per process, so fused and unfused
// matmuls agree bit for bit.
#pragma once

#include <cstdint>
#include <string>

namespace kiln::cpu {

enum class GemmLib { kKiln, kOpenBlas, kOneDnn };

// KILN_GEMM=kiln|openblas|onednn, read once; default kiln where the active SIMD
// level has kernels for it, else OpenBLAS. Throws kiln::Error for an unknown
// name, kiln on a level without its kernels, or onednn in a build without it.
GemmLib gemm_lib();

// What runs the f32 GEMMs, for DeviceInfo::driver ("kiln AVX-512 6x32", ...).
std::string gemm_name();

// kiln's f32 GEMM at the active SIMD level: C (m x n) = op(A) op(B), row-major
// and contiguous (A is k x m when ta, B is n x k when tb), C overwritten. The
// result's bits depend on neither the thread count nor an element's position.
using Sgemm = void (*)(std::int64_t m, std::int64_t n, std::int64_t k, const float* a,
                       const float* b, float* c, bool ta, bool tb);
// One per level with FMA (gemm_kernels.cpp); nullptr on other levels.
Sgemm kiln_sgemm();
#define KILN_DECLARE_GEMM_ISA(ns)                                                       \
  namespace ns {                                                                      \
  void sgemm(std::int64_t m, std::int64_t n, std::int64_t k, const float* a,          \
             const float* b, float* c, bool ta, bool tb);                             \
  const char* sgemm_name();                                                           \
  }
KILN_DECLARE_GEMM_ISA(isa_x86_v3)
KILN_DECLARE_GEMM_ISA(isa_x86_v4)
#undef KILN_DECLARE_GEMM_ISA

// C (m x n) = op(A) op(B), row-major and contiguous (A is k x m when ta, B is
// n x k when tb), through a oneDNN matmul primitive created on first use of the
// shape and cached. Only in builds with oneDNN (KILN_HAVE_ONEDNN).
void onednn_sgemm(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, const float* b,
                  float* c, bool ta, bool tb);

}  // namespace kiln::cpu
