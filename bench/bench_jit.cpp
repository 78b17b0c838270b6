// filter_jit benchmarks, kiln next to LibTorch in the same process:
//  - cache-hit host overhead: a jitted call over a model of N array leaves whose
//    program does no work (it returns one of its inputs), for N = 10, 100, 1000;
//    the slope is the cost per leaf. Flattening alone is measured alongside.
//  - the MLP training step of issue 5 (64-256-256-10, batch 128, softmax cross
//    entropy, Adam): kiln filter_jit (fused and unfused) vs LibTorch 1.13 eager
//    (forward, backward, Adam step), on the default device (KILN_DEVICE).
//  - the first call of that step in a fresh filter_jit (BM_kiln_mlp_first_step:
//    trace, optimize, fuse, kernels, first run; one iteration, so run in a fresh
//    process with an empty KILN_CACHE_DIR it is the cold compile time).
// bench/run_jit.py runs this several times and prints medians and ratios;
// bench/peers.py runs it next to JAX and Equinox. The JSON context names the
// kiln device (kiln_device, kiln_device_name, kiln_device_type), the CPU code
// that runs (kiln_cpu_driver: kiln's SIMD level, f32 GEMM and OpenBLAS's kernels),
// kiln's pool size (kiln_threads), OpenBLAS's thread count (openblas_threads) and
// LibTorch's intra-op one (torch_threads).
#include <benchmark/benchmark.h>

#include <time.h>

#include <cmath>

#include <kiln/kiln.hpp>
#include <tuple>
#include <vector>

#ifdef KILN_BENCH_TORCH
#include <torch/torch.h>
#endif

extern "C" int openblas_get_num_threads(void);  // kiln's (and LibTorch's) BLAS

namespace {

using namespace kiln;

struct Pair {
  Array weight, bias;
  KILN_MODULE(Pair, weight, bias);
};
struct Model {
  std::vector<Pair> layers;
  float scale = 1.0f;
  KILN_MODULE(Model, layers, scale);
};

Model model_with_leaves(std::int64_t leaves) {
  Model m;
  for (std::int64_t i = 0; i < leaves / 2; ++i) m.layers.push_back({ones({4, 4}), ones({4})});
  return m;
}

void BM_kiln_jit_hit(benchmark::State& state) {
  const Model m = model_with_leaves(state.range(0));
  auto f = filter_jit([](const Model& model) { return model.layers[0].bias; });
  f(m);
  for (auto _ : state) benchmark::DoNotOptimize(f(m));
  if (f.trace_count() != 1) state.SkipWithError("retraced");
}
BENCHMARK(BM_kiln_jit_hit)->Arg(10)->Arg(100)->Arg(1000);

void BM_kiln_flatten(benchmark::State& state) {
  const Model m = model_with_leaves(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(tree::flatten(m));
}
BENCHMARK(BM_kiln_flatten)->Arg(100);

constexpr std::int64_t kBatch = 128, kIn = 64, kWidth = 256, kOut = 10;

Array batch_x(std::int64_t in = kIn) { return random::normal(random::key(1), {kBatch, in}); }
Array batch_y() {
  std::vector<std::int32_t> y(kBatch);
  for (std::int64_t i = 0; i < kBatch; ++i) y[i] = static_cast<std::int32_t>(i % kOut);
  return array<std::int32_t>(y, {kBatch});
}

Array loss_fn(const nn::MLP& m, const Array& x, const Array& y) {
  return nn::softmax_cross_entropy_with_integer_labels(m(x), y);
}

void kiln_mlp_step(benchmark::State& state, bool fusion, std::int64_t in = kIn) {
  const auto opt = optim::adam(1e-3);
  nn::MLP model(in, kOut, kWidth, 2, random::key(0));
  optim::State opt_state = opt.init(optim::gradient_template(model));
  auto step = filter_jit(
      [opt](const nn::MLP& m, const optim::State& s, const Array& x, const Array& y) {
        auto [loss, g] = value_and_grad(loss_fn)(m, x, y);
        auto [updates, s2] = opt.update(g, s, m);
        return std::tuple{optim::apply_updates(m, updates), s2, loss};
      },
      {.name = "mlp_step", .fusion = {.enabled = fusion}});
  const Array x = batch_x(in), y = batch_y();
  Array loss;
  for (int i = 0; i < 3; ++i) {
    std::tie(model, opt_state, loss) = step(std::move(model), std::move(opt_state), x, y);
  }
  synchronize(loss.device());
  // host_us: this thread's CPU time inside the call alone (trace-cache hit,
  // launches recorded and submitted), without the wait for the device.
  const auto thread_cpu = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) * 1e-3;
  };
  double host_us = 0;
  for (auto _ : state) {
    const double t0 = thread_cpu();
    std::tie(model, opt_state, loss) = step(std::move(model), std::move(opt_state), x, y);
    host_us += thread_cpu() - t0;
    synchronize(loss.device());
  }
  state.counters["host_us"] = host_us / static_cast<double>(state.iterations());
  state.counters["launches"] = static_cast<double>(step.last_run().launches);
  state.counters["peak_MiB"] = static_cast<double>(step.last_run().peak_bytes) / (1 << 20);
  state.counters["in_place"] = static_cast<double>(step.last_run().reused_in_place);
  if (step.trace_count() != 1) state.SkipWithError("retraced");
}
void BM_kiln_mlp_step(benchmark::State& state) { kiln_mlp_step(state, true); }
void BM_kiln_mlp_step_unfused(benchmark::State& state) { kiln_mlp_step(state, false); }
BENCHMARK(BM_kiln_mlp_step)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_kiln_mlp_step_unfused)->UseRealTime()->Unit(benchmark::kMicrosecond);
// The Fashion-MNIST example's MLP (784-256-256-10): the step of peers.py case (c).
void BM_kiln_mnist_step(benchmark::State& state) { kiln_mlp_step(state, true, 784); }
BENCHMARK(BM_kiln_mnist_step)->UseRealTime()->Unit(benchmark::kMicrosecond);

// The Adam update alone of the MLP's parameters (85k f32): a jitted
// update + apply with the model and state donated, against one hand-written
// loop over the same arrays (the bound; issue 20's target is <= 0.1 ms).
void BM_kiln_adam_update(benchmark::State& state) {
  const auto opt = optim::adam(1e-3);
  nn::MLP model(kIn, kOut, kWidth, 2, random::key(0));
  optim::State opt_state = opt.init(optim::gradient_template(model));
  const nn::MLP grads = tree::map([](const Array& a) { return full_like(a, 0.01); }, model);
  auto update = filter_jit(
      [opt](const nn::MLP& m, const optim::State& s, const nn::MLP& g) {
        auto [updates, s2] = opt.update(g, s, m);
        return std::tuple{optim::apply_updates(m, updates), s2};
      },
      {.name = "adam_update"});
  for (int i = 0; i < 3; ++i) {
    std::tie(model, opt_state) = update(std::move(model), std::move(opt_state), grads);
  }
  synchronize(grads.layers[0].weight.device());
  for (auto _ : state) {
    std::tie(model, opt_state) = update(std::move(model), std::move(opt_state), grads);
    synchronize(grads.layers[0].weight.device());
  }
  state.counters["launches"] = static_cast<double>(update.last_run().launches);
  double params = 0;
  for (const Array& a : tree::leaves(model)) params += static_cast<double>(a.size());
  state.counters["params"] = params;
  if (update.trace_count() != 1) state.SkipWithError("retraced");
}
BENCHMARK(BM_kiln_adam_update)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace
// bench/adam_loop.cpp: one pass over the four arrays, the bound.
void adam_loop(float* p, const float* g, float* m, float* v, std::size_t n, float s1, float s2);
namespace {

void BM_adam_loop(benchmark::State& state) {
  const std::size_t n = 64 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10;
  std::vector<float> p(n, 0.5f), g(n, 0.01f), m(n, 0.0f), v(n, 0.0f);
  float c1 = 1.0f, c2 = 1.0f;
  for (auto _ : state) {
    c1 *= 0.9f;
    c2 *= 0.999f;
    adam_loop(p.data(), g.data(), m.data(), v.data(), n, 1.0f / (1.0f - c1), 1.0f / (1.0f - c2));
    benchmark::DoNotOptimize(p.data());
    benchmark::ClobberMemory();
  }
  state.counters["params"] = static_cast<double>(n);
}
BENCHMARK(BM_adam_loop)->UseRealTime()->Unit(benchmark::kMicrosecond);

void BM_kiln_mlp_cold_compile(benchmark::State& state) {
  // Trace + optimize + fuse + first run (kernels/pipelines included on Vulkan;
  // warm from the disk cache after the first repetition).
  const auto opt = optim::adam(1e-3);
  const Array x = batch_x(), y = batch_y();
  for (auto _ : state) {
    nn::MLP model(kIn, kOut, kWidth, 2, random::key(0));
    optim::State s = opt.init(optim::gradient_template(model));
    auto step = filter_jit([opt](const nn::MLP& m, const optim::State& st, const Array& xb,
                                 const Array& yb) {
      auto [loss, g] = value_and_grad(loss_fn)(m, xb, yb);
      auto [updates, s2] = opt.update(g, st, m);
      return std::tuple{optim::apply_updates(m, updates), s2, loss};
    });
    auto out = step(model, s, x, y);
    synchronize(std::get<2>(out).device());
  }
}
BENCHMARK(BM_kiln_mlp_cold_compile)->UseRealTime()->Unit(benchmark::kMillisecond)->Iterations(3);

void BM_kiln_mlp_first_step(benchmark::State& state) {
  // One fresh filter_jit's first call (trace, optimize, fuse, kernels or
  // pipelines, first run, synchronize); the model, optimizer state and batch are
  // made before the clock starts. In-process kernel caches are warm after the
  // first repetition: for a cold figure run one repetition per process.
  const auto opt = optim::adam(1e-3);
  const Array x = batch_x(), y = batch_y();
  nn::MLP model(kIn, kOut, kWidth, 2, random::key(0));
  optim::State s = opt.init(optim::gradient_template(model));
  synchronize(x.device());
  for (auto _ : state) {
    auto step = filter_jit(
        [opt](const nn::MLP& m, const optim::State& st, const Array& xb, const Array& yb) {
          auto [loss, g] = value_and_grad(loss_fn)(m, xb, yb);
          auto [updates, s2] = opt.update(g, st, m);
          return std::tuple{optim::apply_updates(m, updates), s2, loss};
        },
        {.name = "mlp_step"});
    auto out = step(std::move(model), std::move(s), x, y);  // donated, as in the loop
    synchronize(std::get<2>(out).device());
    std::tie(model, s, std::ignore) = std::move(out);
  }
}
BENCHMARK(BM_kiln_mlp_first_step)->UseRealTime()->Unit(benchmark::kMillisecond)->Iterations(1);

#ifdef KILN_BENCH_TORCH
void BM_torch_jit_equivalent_hit(benchmark::State& state) {
  // LibTorch has no jit cache to hit; its per-call floor for a module of N
  // parameters is collecting them (what an optimizer step walks).
  torch::nn::ModuleList list;
  for (std::int64_t i = 0; i < state.range(0) / 2; ++i) list->push_back(torch::nn::Linear(4, 4));
  for (auto _ : state) benchmark::DoNotOptimize(list->parameters());
}
BENCHMARK(BM_torch_jit_equivalent_hit)->Arg(100);

void BM_torch_mlp_step(benchmark::State& state) {
  torch::manual_seed(0);
  torch::nn::Sequential model(torch::nn::Linear(kIn, kWidth), torch::nn::ReLU(),
                              torch::nn::Linear(kWidth, kWidth), torch::nn::ReLU(),
                              torch::nn::Linear(kWidth, kOut));
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(1e-3));
  const torch::Tensor x = torch::randn({kBatch, kIn});
  const torch::Tensor y = torch::arange(kBatch, torch::kLong).remainder(kOut);
  auto step = [&] {
    opt.zero_grad();
    torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    loss.backward();
    opt.step();
    return loss;
  };
  for (int i = 0; i < 3; ++i) step();
  for (auto _ : state) benchmark::DoNotOptimize(step());
}
BENCHMARK(BM_torch_mlp_step)->UseRealTime()->Unit(benchmark::kMicrosecond);
#endif

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  const Device device = default_device();
  benchmark::AddCustomContext("kiln_device", device.to_string());
  for (const DeviceInfo& info : devices()) {
    if (info.device != device) continue;
    benchmark::AddCustomContext("kiln_device_name", info.name);
    benchmark::AddCustomContext("kiln_device_type", info.type);
  }
  // Which CPU code runs (bench/peers.py prints it next to the CPU rows): kiln's SIMD
  // level, what runs its f32 GEMMs, and OpenBLAS's build and kernels, which
  // KILN_CPU_ISA, KILN_GEMM and OPENBLAS_CORETYPE change.
  benchmark::AddCustomContext("kiln_cpu_driver", devices().front().driver);
  benchmark::AddCustomContext("openblas_threads", std::to_string(openblas_get_num_threads()));
  benchmark::AddCustomContext("kiln_threads", std::to_string(num_threads()));
#ifdef KILN_BENCH_TORCH
  benchmark::AddCustomContext("torch_threads", std::to_string(at::get_num_threads()));
#endif
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
