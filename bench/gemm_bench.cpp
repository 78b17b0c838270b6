// GEMM on the MLP training step's shapes (issue 20, item 4): kiln's own f32
// kernels (backends/cpu/gemm_kernels.cpp, at the process's SIMD level) vs
// OpenBLAS cblas_sgemm, and, in builds with oneDNN, dnnl_sgemm and a cached
// oneDNN matmul primitive. The shapes are the 8 products one kiln MLP step
// (64-256-256-10, batch 128) hands to backends/cpu/matmul.cpp, with kiln's
// transpose flags; then 1024^3 against the measured FMA peak.
//   gemm_bench [rounds] [threads] [mlp|mnist|cnn]
//     threads: kiln's pool and OpenBLAS's (oneDNN always one); the shapes of
//     the MLP step (default), the Fashion-MNIST example's MLP step, or one
//     image's products in the CNN step
// The machine is shared, so variants are interleaved round by round and the
// median per call is reported: process CPU time (all threads) and wall time.
#include <cblas.h>
#include <immintrin.h>
#ifdef KILN_HAVE_ONEDNN
#include <omp.h>
#endif
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#ifdef KILN_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>
#endif
#include <random>
#include <span>
#include <string>
#include <vector>

#include "fma_peak.hpp"
#include "kiln/backends/cpu/gemm.hpp"
#include "kiln/runtime/thread_pool.hpp"

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

// Per image, the CNN step's convolutions (bench/cnn_step: 3x3 convs 1->32 on
// 28x28 and 32->64 on 14x14, as unfold + matmul; batched over 128 images).
const Shape kCnnStep[] = {
    {"conv1 W@cols", 32, 784, 9, false, false},   {"conv2 W@cols", 64, 196, 288, false, false},
    {"conv2 dY@cols^T", 64, 288, 196, false, true}, {"conv2 W^T@dY", 288, 196, 64, true, false},
    {"conv1 dY@cols^T", 32, 9, 784, false, true},
};

// The same for the Fashion-MNIST example's MLP (784-256-256-10, batch 128).
const Shape kEpochStep[] = {
    {"fwd x@W1^T", 128, 256, 784, false, true},   {"fwd h1@W2^T", 128, 256, 256, false, true},
    {"fwd h2@W3^T", 128, 10, 256, false, true},   {"bwd dy@W3", 128, 256, 10, false, false},
    {"bwd dy^T@h2", 10, 256, 128, true, false},   {"bwd dh2@W2", 128, 256, 256, false, false},
    {"bwd dh2^T@h1", 256, 256, 128, true, false}, {"bwd dh1^T@x", 256, 784, 128, true, false},
};

double process_cpu_s() {  // all threads: the pools' work counts
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
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

void run_kiln(const Shape& s, Operands& o) {
  kiln::cpu::kiln_sgemm()(s.m, s.n, s.k, o.a.data(), o.b.data(), o.c.data(), s.ta, s.tb);
}

#ifdef KILN_HAVE_ONEDNN
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

#endif

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
  const double c0 = process_cpu_s();
  const double w0 = wall_s();
  for (int i = 0; i < reps; ++i) f();
  out.add((process_cpu_s() - c0) / reps, (wall_s() - w0) / reps);
}

struct Variant {
  const char* name;
  std::function<std::function<void()>(const Shape&, Operands&)> make;
};

std::vector<Variant> variants() {
  std::vector<Variant> v;
  if (kiln::cpu::kiln_sgemm() != nullptr) {
    v.push_back({"kiln", [](const Shape& s, Operands& o) {
                   return std::function<void()>([&s, &o] { run_kiln(s, o); });
                 }});
  }
  v.push_back({"openblas", [](const Shape& s, Operands& o) {
                 return std::function<void()>([&s, &o] { run_openblas(s, o); });
               }});
#ifdef KILN_HAVE_ONEDNN
  v.push_back({"dnnl_sgemm", [](const Shape& s, Operands& o) {
                 return std::function<void()>([&s, &o] { run_dnnl_sgemm(s, o); });
               }});
  v.push_back({"dnnl_matmul", [](const Shape& s, Operands& o) {
                 std::shared_ptr<Primitive> p = make_primitive(s, o);
                 return std::function<void()>([p] { run_primitive(*p); });
               }});
#endif
  return v;
}

// Median CPU and wall us per call of each variant on `s`, interleaved rounds.
std::vector<std::pair<double, double>> measure(const Shape& s, const std::vector<Variant>& vs,
                                               int rounds, int reps) {
  Operands o = make(s);
  std::vector<std::function<void()>> fs;
  for (const Variant& v : vs) fs.push_back(v.make(s, o));
  std::vector<Sample> samples(vs.size());
  const std::size_t nv = vs.size();
  for (int r = 0; r < rounds; ++r) {
    for (std::size_t v = 0; v < nv; ++v) {
      const std::size_t i = (v + static_cast<std::size_t>(r)) % nv;
      time_calls(fs[i], reps, samples[i]);
    }
  }
  std::vector<std::pair<double, double>> out;
  for (const Sample& x : samples) out.emplace_back(median(x.cpu) * 1e6, median(x.wall) * 1e6);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 15;
  const int threads = argc > 2 ? std::atoi(argv[2]) : 1;
  const std::string table = argc > 3 ? argv[3] : "mlp";
  openblas_set_num_threads(threads);
  kiln::set_num_threads(threads);
#ifdef KILN_HAVE_ONEDNN
  omp_set_num_threads(1);  // Debian's oneDNN is an OMP build: its team would spin
#endif
  const std::vector<Variant> vs = variants();
  std::printf("%d thread(s), %d interleaved rounds, median per call (us; cpu = all threads)\n",
              threads, rounds);
  std::printf("f32 GEMM at this SIMD level: %s\n", kiln::cpu::gemm_name().c_str());
  std::printf("%-14s %4s %4s %4s %2s%2s |", "shape", "m", "n", "k", "tA", "tB");
  for (const Variant& v : vs) std::printf(" %11s cpu", v.name);
  for (const Variant& v : vs) std::printf(" %11s wall", v.name);
  std::printf("\n");
  std::vector<double> sum_cpu(vs.size()), sum_wall(vs.size());
  const std::span<const Shape> shapes = table == "mnist" ? std::span<const Shape>(kEpochStep)
                                        : table == "cnn"  ? std::span<const Shape>(kCnnStep)
                                                          : std::span<const Shape>(kStep);
  for (const Shape& s : shapes) {
    const double flops = 2.0 * static_cast<double>(s.m * s.n * s.k);
    const auto t = measure(s, vs, rounds, std::max(20, static_cast<int>(2e8 / flops)));
    std::printf("%-14s %4ld %4ld %4ld %2s%2s |", s.what, s.m, s.n, s.k, s.ta ? "T" : "N",
                s.tb ? "T" : "N");
    for (std::size_t v = 0; v < vs.size(); ++v) {
      std::printf(" %15.2f", t[v].first);
      sum_cpu[v] += t[v].first;
      sum_wall[v] += t[v].second;
    }
    for (std::size_t v = 0; v < vs.size(); ++v) std::printf(" %16.2f", t[v].second);
    std::printf("\n");
  }
  std::printf("%-14s %25s |", "sum", "");
  for (double x : sum_cpu) std::printf(" %15.2f", x);
  for (double x : sum_wall) std::printf(" %16.2f", x);
  std::printf("  (sums of medians)\n");

  // 1024^3 against the measured FMA peak of one core times the threads.
  const Shape big{"1024^3", 1024, 1024, 1024, false, false};
  const auto t = measure(big, vs, std::max(3, rounds / 3), 3);
  const double p2 = kiln_bench::fma_avx2(20000000);
  __builtin_cpu_init();
  const double p5 = __builtin_cpu_supports("avx512f") ? kiln_bench::fma_avx512(20000000) : 0.0;
  std::printf("\nFMA peak, one core (thread cpu): AVX2 %.1f GFLOP/s, AVX-512 %.1f GFLOP/s\n",
              p2 * 1e-9, p5 * 1e-9);
  const double peak = std::max(p2, p5) * threads;
  for (std::size_t v = 0; v < vs.size(); ++v) {
    const double g = 2.0 * 1024 * 1024 * 1024 / (t[v].second * 1e-6) * 1e-9;
    std::printf("1024^3 %-12s %7.2f ms cpu %7.2f ms wall  %6.1f GFLOP/s (wall)  %4.0f%% of the %d-core peak\n",
                vs[v].name, t[v].first * 1e-3, t[v].second * 1e-3, g, 100 * g / (peak * 1e-9),
                threads);
  }
  return 0;
}
