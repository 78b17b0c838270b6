// The measured f32 FMA peak of one core, for the GEMM benches (gemm_bench,
// matmul_peak): 12 independent FMA chains on AVX2 ymm or AVX-512 zmm
// registers, timed on the calling thread's CPU clock (so time the OS gives
// other processes does not count against it).
#pragma once

#include <immintrin.h>
#include <time.h>

#include <cstdio>

namespace kiln_bench {

inline double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// FMA throughput with 12 independent accumulators (latency 4 x 2 pipes < 12).
// Returns FLOPs per second of thread CPU time.
__attribute__((target("avx2,fma"))) inline double fma_avx2(long iters) {
  __m256 acc[12];
  for (auto& x : acc) x = _mm256_set1_ps(0.0f);
  const __m256 a = _mm256_set1_ps(1.0000001f);
  const __m256 b = _mm256_set1_ps(0.9999999f);
  const double c0 = thread_cpu_s();
  for (long i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (auto& x : acc) x = _mm256_fmadd_ps(a, x, b);
  }
  const double t = thread_cpu_s() - c0;
  float sink = 0;
  for (auto& x : acc) sink += _mm256_cvtss_f32(x);
  if (sink == 42.0f) std::puts("");
  return 2.0 * 8 * 12 * static_cast<double>(iters) / t;
}

__attribute__((target("avx512f"))) inline double fma_avx512(long iters) {
  __m512 acc[12];
  for (auto& x : acc) x = _mm512_set1_ps(0.0f);
  const __m512 a = _mm512_set1_ps(1.0000001f);
  const __m512 b = _mm512_set1_ps(0.9999999f);
  const double c0 = thread_cpu_s();
  for (long i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (auto& x : acc) x = _mm512_fmadd_ps(a, x, b);
  }
  const double t = thread_cpu_s() - c0;
  float sink = 0;
  for (auto& x : acc) sink += _mm512_cvtss_f32(x);
  if (sink == 42.0f) std::puts("");
  return 2.0 * 16 * 12 * static_cast<double>(iters) / t;
}

}  // namespace kiln_bench
