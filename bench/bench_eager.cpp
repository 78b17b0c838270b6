// Eager-mode microbenchmarks, kiln next to its peers in the same process:
//  - dispatch: add of two 1-element arrays (kiln vs LibTorch),
//  - pytree flatten of a 100-leaf model (kiln) vs collecting the parameters of the
//    equivalent LibTorch module,
//  - elementwise throughput in GB/s (kiln add, LibTorch add) vs memcpy (the limit).
// bench/run.py runs this several times and prints medians and ratios.
#include <benchmark/benchmark.h>

#include <cstring>
#include <kiln/kiln.hpp>
#include <vector>

#ifdef KILN_BENCH_TORCH
#include <torch/torch.h>
#endif

namespace {

struct Linear {
  kiln::Array weight, bias;
  KILN_MODULE(Linear, weight, bias);
};
struct Model {
  std::vector<Linear> layers;
  float scale = 1.0f;
  KILN_MODULE(Model, layers, scale);
};

void BM_kiln_add_1elem(benchmark::State& state) {
  kiln::Array a = kiln::ones({1});
  kiln::Array b = kiln::ones({1});
  for (auto _ : state) benchmark::DoNotOptimize(kiln::add(a, b));
}
BENCHMARK(BM_kiln_add_1elem);

void BM_kiln_flatten_100_leaves(benchmark::State& state) {
  Model m;
  for (int i = 0; i < 50; ++i) m.layers.push_back({kiln::ones({4, 4}), kiln::ones({4})});
  for (auto _ : state) benchmark::DoNotOptimize(kiln::tree::flatten(m));
}
BENCHMARK(BM_kiln_flatten_100_leaves);

constexpr std::int64_t kSmall = 1 << 16;   // 256 KiB per f32 operand: in cache
constexpr std::int64_t kLarge = 1 << 24;   // 64 MiB per operand: memory bound

void BM_kiln_add_f32(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  kiln::Array a = kiln::ones({n});
  kiln::Array b = kiln::ones({n});
  for (auto _ : state) benchmark::DoNotOptimize(kiln::add(a, b));
  state.SetBytesProcessed(state.iterations() * n * 4 * 3);  // 2 reads + 1 write
}
BENCHMARK(BM_kiln_add_f32)->Arg(kSmall)->Arg(kLarge)->UseRealTime();

// The physical limit for a streaming kernel: copy the same bytes (1 read + 1 write
// of an operand; reported per byte moved, so comparable with add's 3 streams).
void BM_memcpy(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  std::vector<float> src(n, 1.0f), dst(n);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), n * 4);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * 4 * 2);
}
BENCHMARK(BM_memcpy)->Arg(kSmall)->Arg(kLarge)->UseRealTime();

#ifdef KILN_BENCH_TORCH
void BM_torch_add_1elem(benchmark::State& state) {
  torch::NoGradGuard no_grad;
  auto a = torch::ones({1});
  auto b = torch::ones({1});
  for (auto _ : state) benchmark::DoNotOptimize(torch::add(a, b));
}
BENCHMARK(BM_torch_add_1elem);

void BM_torch_parameters_100_leaves(benchmark::State& state) {
  torch::nn::Sequential seq;
  for (int i = 0; i < 50; ++i) seq->push_back(torch::nn::Linear(4, 4));
  for (auto _ : state) benchmark::DoNotOptimize(seq->parameters());
}
BENCHMARK(BM_torch_parameters_100_leaves);

void BM_torch_add_f32(benchmark::State& state) {
  torch::NoGradGuard no_grad;
  const std::int64_t n = state.range(0);
  auto a = torch::ones({n});
  auto b = torch::ones({n});
  for (auto _ : state) benchmark::DoNotOptimize(torch::add(a, b));
  state.SetBytesProcessed(state.iterations() * n * 4 * 3);
}
BENCHMARK(BM_torch_add_f32)->Arg(kSmall)->Arg(kLarge)->UseRealTime();
#endif

}  // namespace

BENCHMARK_MAIN();
