// Vulkan backend microbenchmarks (lavapipe on CI machines, the vendor driver on
// a GPU), each next to its limit or peer measured in the same run:
//  - elementwise add GB/s on Vulkan vs the CPU backend vs memcpy,
//  - submit + wait latency of one tiny dispatch,
//  - tiled matmul GFLOP/s at 1024^2 vs the CPU backend (OpenBLAS),
//  - kernel compile latency (SPIR-V build + validate + pipeline + first dispatch).
// bench/run.py --vulkan runs it and prints medians and ratios.
#include <benchmark/benchmark.h>

#include <cstring>
#include <kiln/kiln.hpp>
#include <vector>

namespace {

const kiln::Device kGpu = kiln::Device::vulkan(0);

void BM_vk_add_f32(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  kiln::Array a = kiln::ones({n}, kiln::f32, kGpu);
  kiln::Array b = kiln::ones({n}, kiln::f32, kGpu);
  benchmark::DoNotOptimize(kiln::add(a, b));  // compile outside the timing
  kiln::synchronize(kGpu);
  for (auto _ : state) {
    benchmark::DoNotOptimize(kiln::add(a, b));
    kiln::synchronize(kGpu);
  }
  state.SetBytesProcessed(state.iterations() * n * 12);
}
BENCHMARK(BM_vk_add_f32)->Arg(1 << 16)->Arg(1 << 24)->UseRealTime();

void BM_cpu_add_f32(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  kiln::Array a = kiln::ones({n}, kiln::f32, kiln::Device::cpu());
  kiln::Array b = kiln::ones({n}, kiln::f32, kiln::Device::cpu());
  for (auto _ : state) benchmark::DoNotOptimize(kiln::add(a, b));
  state.SetBytesProcessed(state.iterations() * n * 12);
}
BENCHMARK(BM_cpu_add_f32)->Arg(1 << 16)->Arg(1 << 24)->UseRealTime();

void BM_memcpy(benchmark::State& state) {
  const std::size_t n = static_cast<std::size_t>(state.range(0)) * 4;
  std::vector<char> src(n, 1), dst(n);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), n);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n * 2));
}
BENCHMARK(BM_memcpy)->Arg(1 << 16)->Arg(1 << 24)->UseRealTime();

void BM_vk_submit_wait(benchmark::State& state) {
  kiln::Array a = kiln::ones({1}, kiln::f32, kGpu);
  benchmark::DoNotOptimize(kiln::add(a, a));
  kiln::synchronize(kGpu);
  for (auto _ : state) {
    benchmark::DoNotOptimize(kiln::add(a, a));
    kiln::synchronize(kGpu);
  }
}
BENCHMARK(BM_vk_submit_wait)->UseRealTime();

void matmul_bench(benchmark::State& state, kiln::Device d) {
  const std::int64_t n = state.range(0);
  kiln::Array a = kiln::full({n, n}, 0.5, kiln::f32, d);
  kiln::Array b = kiln::full({n, n}, 0.25, kiln::f32, d);
  benchmark::DoNotOptimize(kiln::matmul(a, b));  // compile outside the timing
  kiln::synchronize(d);
  for (auto _ : state) {
    benchmark::DoNotOptimize(kiln::matmul(a, b));
    kiln::synchronize(d);
  }
  state.counters["GFLOPS"] = benchmark::Counter(
      2.0 * static_cast<double>(n * n * n) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}
void BM_vk_matmul(benchmark::State& state) { matmul_bench(state, kGpu); }
void BM_cpu_matmul(benchmark::State& state) { matmul_bench(state, kiln::Device::cpu()); }
BENCHMARK(BM_vk_matmul)->Arg(1024)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_cpu_matmul)->Arg(1024)->UseRealTime()->Unit(benchmark::kMillisecond);

// A kernel no one built before (the fill value is baked into it): build, validate,
// create the pipeline and run it once. Disk-cache hits show up as lower times.
// One kernel runs before the timing: the device's first dispatch starts the
// driver (thread pool, JIT target setup), which is not a per-kernel cost.
void BM_vk_compile_kernel(benchmark::State& state) {
  static double value = 0.125;
  benchmark::DoNotOptimize(kiln::full({4}, -1.0, kiln::f32, kGpu));
  kiln::synchronize(kGpu);
  for (auto _ : state) {
    value += 1.0;
    benchmark::DoNotOptimize(kiln::full({4}, value, kiln::f32, kGpu));
    kiln::synchronize(kGpu);
  }
}
BENCHMARK(BM_vk_compile_kernel)->Iterations(40)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
