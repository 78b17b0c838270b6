// Matmul n x n x n f32 (default 1024^3) on kiln's CPU backend against the
// measured FMA peak of the same number of cores (case (g) of bench/peers.py;
// issue 20's target: >= 70% of the 2-core peak).
//
// For each thread count t (--threads, default 1,2):
//  - peak: t threads each run a loop of 12 independent FMA chains (AVX-512 zmm if
//    the CPU has it, else AVX2 ymm; the loop of bench/gemm_bench.cpp), started
//    together; the peak is the sum over threads of FLOPs / thread CPU time (so
//    time the OS gives other processes does not count against it), the best of
//    3 runs; the wall-time figure (FLOPs of all threads / wall) is printed next
//    to it and is lower when the cores are shared.
//  - kiln: an Executable of matmul(a, b) on the CPU device with
//    kiln::set_num_threads(t) and openblas_set_num_threads(t) (kiln's f32 GEMM
//    is its own kernels over its pool where the SIMD level has FMA, else
//    OpenBLAS; KILN_GEMM picks; the JSON's driver names it); the median wall
//    time of calls interleaved with the next row, after one warm-up call.
//  - openblas: cblas_sgemm on the same buffers, same threads (the library
//    kiln used before its own kernels, and what KILN_GEMM=openblas runs).
// One JSON line per thread count with --json (bench/peers.py reads them), else a
// table. The JSON names the CPU code (kiln's DeviceInfo.driver: SIMD level, f32
// GEMM, OpenBLAS kernels).
//   build/bench/matmul_peak [--n N] [--threads 1,2] [--seconds S] [--json]
#include <cblas.h>
#include <immintrin.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <kiln/dsl/executable.hpp>
#include <kiln/dsl/trace.hpp>
#include <kiln/kiln.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "json_text.hpp"

#include "fma_peak.hpp"

extern "C" void openblas_set_num_threads(int);
extern "C" int openblas_get_num_threads(void);

namespace {

using namespace kiln;
using kiln_bench::fma_avx2;
using kiln_bench::fma_avx512;
using kiln_bench::escaped;
using kiln_bench::thread_cpu_s;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Peak {
  const char* isa = "none";
  double cpu_gflops = 0;   // sum over threads of FLOPs / thread CPU time
  double wall_gflops = 0;  // all threads' FLOPs / wall time
};

// One run of `threads` FMA loops started together.
Peak fma_peak_once(int threads, long iters) {
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  Peak p;
  if (!avx512 && !avx2) return p;
  p.isa = avx512 ? "avx512" : "avx2";
  std::vector<double> rate(static_cast<std::size_t>(threads));
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load()) std::this_thread::yield();
      rate[static_cast<std::size_t>(t)] = avx512 ? fma_avx512(iters) : fma_avx2(iters);
    });
  }
  while (ready.load() < threads) std::this_thread::yield();
  const double w0 = now_s();
  go.store(true);
  for (auto& th : pool) th.join();
  const double wall = now_s() - w0;
  for (double r : rate) p.cpu_gflops += r * 1e-9;
  p.wall_gflops = 2.0 * (avx512 ? 16 : 8) * 12 * static_cast<double>(iters) * threads / wall * 1e-9;
  return p;
}

Peak fma_peak(int threads) {
  Peak best;
  for (int r = 0; r < 3; ++r) {
    const Peak p = fma_peak_once(threads, 20000000);
    best.isa = p.isa;
    best.cpu_gflops = std::max(best.cpu_gflops, p.cpu_gflops);
    best.wall_gflops = std::max(best.wall_gflops, p.wall_gflops);
  }
  return best;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}


}  // namespace

int main(int argc, char** argv) {
  std::int64_t n = 1024;
  std::vector<int> thread_counts{1, 2};
  double seconds = 1.0;  // per thread count, kiln and OpenBLAS together
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json") {
      json = true;
    } else if (a == "--n" && i + 1 < argc) {
      n = std::atoll(argv[++i]);
    } else if (a == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (a == "--threads" && i + 1 < argc) {
      thread_counts.clear();
      std::stringstream list(argv[++i]);
      for (std::string item; std::getline(list, item, ',');) thread_counts.push_back(std::stoi(item));
    } else {
      std::cerr << "usage: " << argv[0] << " [--n N] [--threads 1,2] [--seconds S] [--json]\n";
      return 2;
    }
  }
  const Device cpu = Device::cpu();
  set_default_device(cpu);
  const std::string driver = devices().front().driver;
  Program p;
  {
    Trace t;
    const Array a = t.input({f32, {n, n}}, cpu, "a");
    const Array b = t.input({f32, {n, n}}, cpu, "b");
    const Array out = matmul(a, b);
    p = t.finish(std::span<const Array>(&out, 1));
  }
  optimize(p);
  const Executable exe(p, cpu, "matmul");
  const Array keys = random::split(random::key(0), 2);
  const Array a = random::normal(reshape(slice_axis(keys, 0, 0, 1), {2}), {n, n});
  const Array b = random::normal(reshape(slice_axis(keys, 0, 1, 2), {2}), {n, n});
  const Array* inputs[] = {&a, &b};
  std::vector<float> c(static_cast<std::size_t>(n * n));
  const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);

  auto kiln_call = [&] {
    const double t0 = now_s();
    std::vector<Array> out = exe.run(std::span<const Array* const>(inputs, 2));
    synchronize(cpu);
    return now_s() - t0;
  };
  auto blas_call = [&] {
    const double t0 = now_s();
    const int ni = static_cast<int>(n);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ni, ni, ni, 1.0f, a.data<float>(), ni,
                b.data<float>(), ni, 0.0f, c.data(), ni);
    return now_s() - t0;
  };

  if (!json) {
    std::printf("matmul %ld^3 f32; %s\n", static_cast<long>(n), driver.c_str());
    std::printf("%7s %8s %12s %12s | %10s %12s | %10s %12s\n", "threads", "isa", "peak cpu",
                "peak wall", "kiln ms", "kiln GF/s", "blas ms", "blas GF/s");
  }
  for (const int t : thread_counts) {
    set_num_threads(t);
    openblas_set_num_threads(t);
    kiln_call();  // warm-up: plan, buffers, OpenBLAS's threads started
    blas_call();
    std::vector<double> tk, tb;
    const double start = now_s();
    while (tk.size() < 5 || (now_s() - start < seconds && tk.size() < 1000)) {
      tk.push_back(kiln_call());
      tb.push_back(blas_call());
    }
    const Peak peak = fma_peak(t);
    const double mk = median(tk), mb = median(tb);
    const double gk = flops / mk * 1e-9, gb = flops / mb * 1e-9;
    if (json) {
      std::printf(
          "{\"n\": %ld, \"threads\": %d, \"openblas_threads\": %d, \"kiln_threads\": %d, "
          "\"calls\": %zu, \"kiln_ms\": %.4f, \"kiln_gflops\": %.2f, \"openblas_ms\": %.4f, "
          "\"openblas_gflops\": %.2f, \"peak_isa\": \"%s\", \"peak_gflops\": %.2f, "
          "\"peak_wall_gflops\": %.2f, \"driver\": \"%s\"}\n",
          static_cast<long>(n), t, openblas_get_num_threads(), num_threads(), tk.size(), mk * 1e3,
          gk, mb * 1e3, gb, peak.isa, peak.cpu_gflops, peak.wall_gflops, escaped(driver).c_str());
    } else {
      std::printf("%7d %8s %12.1f %12.1f | %10.3f %7.1f (%2.0f%%) | %10.3f %7.1f (%2.0f%%)\n", t,
                  peak.isa, peak.cpu_gflops, peak.wall_gflops, mk * 1e3, gk,
                  100 * gk / peak.cpu_gflops, mb * 1e3, gb, 100 * gb / peak.cpu_gflops);
    }
    std::fflush(stdout);
  }
  return 0;
}
