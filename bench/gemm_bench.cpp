// GEMM libraries on the MLP training step's shapes (issue 20, item 4): OpenBLAS
// cblas_sgemm vs oneDNN dnnl_sgemm vs a cached oneDNN matmul primitive, all on
// one thread. The shapes are the 8 products one kiln MLP step (64-256-256-10,
// batch 128) hands to backends/cpu/matmul.cpp, with kiln's transpose flags.
// The machine is shared, so variants are interleaved round by round and the
// median of thread CPU time (and wall time) per call is reported.
#include <cblas.h>
#include <immintrin.h>
#include <omp.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <random>
#include <string>
#include <vector>

extern "C" void openblas_set_num_threads(int);

namespace {

struct Shape {
  const char* what;
  long m, n, k;
  bool ta, tb;
};

// Printed by kiln's gemm for one step of BM_kiln_mlp_step (C = op(A) op(B)).
const Shape kStep[] = {
    {"fwd x@W1^T", 128, 256, 64, false, true},    {"fwd h1@W2^T", 128, 256, 256, false, true},
    {"fwd h2@W3^T", 128, 10, 256, false, true},   {"bwd dy@W3", 128, 256, 10, false, false},
    {"bwd dy^T@h2", 10, 256, 128, true, false},   {"bwd dh2@W2", 128, 256, 256, false, false},
    {"bwd dh2^T@h1", 256, 256, 128, true, false}, {"bwd dh1^T@x", 256, 64, 128, true, false},
};

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double wall_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Operands {
  std::vector<float> a, b, c;
  long lda, ldb, ldc;
};

Operands make(const Shape& s) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  Operands o;
  o.a.resize(static_cast<std::size_t>(s.m * s.k));
  o.b.resize(static_cast<std::size_t>(s.k * s.n));
  o.c.resize(static_cast<std::size_t>(s.m * s.n));
  for (auto& x : o.a) x = d(rng);
  for (auto& x : o.b) x = d(rng);
  o.lda = s.ta ? s.m : s.k;
  o.ldb = s.tb ? s.k : s.n;
  o.ldc = s.n;
  return o;
}

void run_openblas(const Shape& s, Operands& o) {
  cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(s.m), static_cast<int>(s.n), static_cast<int>(s.k), 1.0f, o.a.data(),
              static_cast<int>(o.lda), o.b.data(), static_cast<int>(o.ldb), 0.0f, o.c.data(),
              static_cast<int>(o.ldc));
}

void run_dnnl_sgemm(const Shape& s, Operands& o) {
  dnnl_sgemm(s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.m, s.n, s.k, 1.0f, o.a.data(), o.lda, o.b.data(),
             o.ldb, 0.0f, o.c.data(), o.ldc);
}

// The matmul primitive as kiln would use it: created on first use, cached per
// shape, then only executed. A transposed operand is a column-major ("ba")
// desc.
struct Primitive {
  dnnl::matmul prim;
  dnnl::memory a, b, c;
};

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

std::unique_ptr<Primitive> make_primitive(const Shape& s, Operands& o) {
  using tag = dnnl::memory::format_tag;
  using dt = dnnl::memory::data_type;
  const dnnl::memory::desc ad({s.m, s.k}, dt::f32, s.ta ? tag::ba : tag::ab);
  const dnnl::memory::desc bd({s.k, s.n}, dt::f32, s.tb ? tag::ba : tag::ab);
  const dnnl::memory::desc cd({s.m, s.n}, dt::f32, tag::ab);
  auto p = std::make_unique<Primitive>();
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(ad, bd, cd), engine());
  p->prim = dnnl::matmul(pd);
  p->a = dnnl::memory(ad, engine(), o.a.data());
  p->b = dnnl::memory(bd, engine(), o.b.data());
  p->c = dnnl::memory(cd, engine(), o.c.data());
  return p;
}

void run_primitive(Primitive& p) {
  static dnnl::stream stream(engine());
  p.prim.execute(stream, {{DNNL_ARG_SRC, p.a}, {DNNL_ARG_WEIGHTS, p.b}, {DNNL_ARG_DST, p.c}});
  stream.wait();
}

struct Sample {
  std::vector<double> cpu, wall;
  void add(double c, double w) {
    cpu.push_back(c);
    wall.push_back(w);
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Per-call seconds of `reps` calls, thread CPU and wall.
void time_calls(const std::function<void()>& f, int reps, Sample& out) {
  f();  // warm caches / JIT
  const double c0 = thread_cpu_s();
  const double w0 = wall_s();
  for (int i = 0; i < reps; ++i) f();
  out.add((thread_cpu_s() - c0) / reps, (wall_s() - w0) / reps);
}

// FMA throughput with 12 independent accumulators (latency 4 x 2 pipes < 12):
// the core's measured f32 peak, AVX2 (256-bit) and AVX-512.
__attribute__((target("avx2,fma"))) double peak_avx2(long iters) {
  __m256 acc[12];
  for (auto& x : acc) x = _mm256_set1_ps(0.0f);
  const __m256 a = _mm256_set1_ps(1.0000001f);
  const __m256 b = _mm256_set1_ps(0.9999999f);
  const double c0 = thread_cpu_s();
  for (long i = 0; i < iters; ++i) {
    // Unrolled so the accumulators live in registers, not on the stack.
#pragma GCC unroll 12
    for (auto& x : acc) x = _mm256_fmadd_ps(a, x, b);
  }
  const double t = thread_cpu_s() - c0;
  float sink = 0;
  for (auto& x : acc) sink += _mm256_cvtss_f32(x);
  if (sink == 42.0f) std::puts("");
  return 2.0 * 8 * 12 * static_cast<double>(iters) / t;
}

__attribute__((target("avx512f"))) double peak_avx512(long iters) {
  __m512 acc[12];
  for (auto& x : acc) x = _mm512_set1_ps(0.0f);
  const __m512 a = _mm512_set1_ps(1.0000001f);
  const __m512 b = _mm512_set1_ps(0.9999999f);
  const double c0 = thread_cpu_s();
  for (long i = 0; i < iters; ++i) {
    // Unrolled so the accumulators live in registers, not on the stack.
#pragma GCC unroll 12
    for (auto& x : acc) x = _mm512_fmadd_ps(a, x, b);
  }
  const double t = thread_cpu_s() - c0;
  float sink = 0;
  for (auto& x : acc) sink += _mm512_cvtss_f32(x);
  if (sink == 42.0f) std::puts("");
  return 2.0 * 16 * 12 * static_cast<double>(iters) / t;
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 15;
  // One thread everywhere: OpenBLAS's pool and oneDNN's OpenMP team (Debian's
  // oneDNN is an OMP build: no dnnl_set_max_threads, no threadpool interop).
  openblas_set_num_threads(1);
  omp_set_num_threads(1);
  const char* names[] = {"openblas", "dnnl_sgemm", "dnnl_matmul"};

  std::printf("one thread, %d interleaved rounds, median per call (us)\n", rounds);
  std::printf("%-14s %4s %4s %4s %2s%2s | %9s %9s %9s | %9s %9s %9s\n", "shape", "m", "n", "k",
              "tA", "tB", "blas cpu", "sgemm cpu", "mm cpu", "blas wall", "sgemm wall", "mm wall");
  double sum[3] = {0, 0, 0};
  for (const Shape& s : kStep) {
    Operands o = make(s);
    auto prim = make_primitive(s, o);
    const std::function<void()> fs[3] = {[&] { run_openblas(s, o); }, [&] { run_dnnl_sgemm(s, o); },
                                         [&] { run_primitive(*prim); }};
    Sample samples[3];
    const double flops = 2.0 * static_cast<double>(s.m * s.n * s.k);
    const int reps = std::max(20, static_cast<int>(2e8 / flops));
    for (int r = 0; r < rounds; ++r)
      for (int v = 0; v < 3; ++v) time_calls(fs[(v + r) % 3], reps, samples[(v + r) % 3]);
    double cpu[3], wall[3];
    for (int v = 0; v < 3; ++v) {
      cpu[v] = median(samples[v].cpu) * 1e6;
      wall[v] = median(samples[v].wall) * 1e6;
      sum[v] += cpu[v];
    }
    std::printf("%-14s %4ld %4ld %4ld %2s%2s | %9.2f %9.2f %9.2f | %9.2f %9.2f %9.2f\n", s.what,
                s.m, s.n, s.k, s.ta ? "T" : "N", s.tb ? "T" : "N", cpu[0], cpu[1], cpu[2], wall[0],
                wall[1], wall[2]);
  }
  std::printf("%-14s %25s | %9.2f %9.2f %9.2f  (sum of medians, cpu)\n", "step (8 GEMMs)", "",
              sum[0], sum[1], sum[2]);

  // 1024^3 against the measured FMA peak of one core.
  const Shape big{"1024^3", 1024, 1024, 1024, false, false};
  Operands o = make(big);
  auto prim = make_primitive(big, o);
  const std::function<void()> fs[3] = {[&] { run_openblas(big, o); },
                                       [&] { run_dnnl_sgemm(big, o); },
                                       [&] { run_primitive(*prim); }};
  Sample samples[3];
  for (int r = 0; r < std::max(3, rounds / 3); ++r)
    for (int v = 0; v < 3; ++v) time_calls(fs[(v + r) % 3], 3, samples[(v + r) % 3]);
  const double p2 = peak_avx2(20000000);
  const double p5 = peak_avx512(20000000);
  std::printf(
      "\nFMA peak, one core (thread cpu): AVX2 %.1f GFLOP/s, AVX-512 %.1f "
      "GFLOP/s\n",
      p2 * 1e-9, p5 * 1e-9);
  const double peak = std::max(p2, p5);
  for (int v = 0; v < 3; ++v) {
    const double t = median(samples[v].cpu);
    const double g = 2.0 * 1024 * 1024 * 1024 / t * 1e-9;
    std::printf(
        "1024^3 %-12s %7.2f ms cpu %7.2f ms wall  %6.1f GFLOP/s  %4.0f%% of "
        "peak\n",
        names[v], t * 1e3, median(samples[v].wall) * 1e3, g, 100 * g / (peak * 1e-9));
  }
  return 0;
}
