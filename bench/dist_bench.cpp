// Data parallel on one machine (kiln::dist, CPU backend): training-step
// throughput with 1, 2 and 4 rank processes, and all-reduce time per MB:
// kiln's all_reduce_mean (bucketed host staging + the communication thread)
// next to raw Gloo ring allreduces of the same bytes in the same run (one
// allreduce, and one per bucket-sized chunk).
//   build/bench/dist_bench [worlds (default 1,2,4)] [steps (default 30)]
// The binary launches itself once per world size (dist::launch_local); rank 0
// of each world prints "train ..." and "allreduce ..." lines, this process the
// table. Every rank runs with OPENBLAS_NUM_THREADS=1 and KILN_NUM_THREADS=1, so a
// world of N uses N cores' worth of kernel and GEMM threads.
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <kiln/dist/dist.hpp>
#include <kiln/dist/launch.hpp>
#include <kiln/kiln.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace kiln;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::int64_t kIn = 784, kWidth = 512, kDepth = 2, kOut = 10, kBatch = 128;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Array loss(const nn::MLP& m, const Array& x, const Array& y) {
  return nn::softmax_cross_entropy_with_integer_labels(m(x), y);
}

// One rank: training steps, then all-reduces of growing size.
int rank_main(int steps) {
  const dist::Group group = dist::init();
  const bool report = group.rank() == 0;
  const int world = group.world_size();

  const auto opt = optim::adam(1e-3);
  auto grad_step = filter_jit([](const nn::MLP& m, const Array& x, const Array& y) {
    return value_and_grad(loss)(m, x, y);
  });
  auto update = filter_jit([opt](const nn::MLP& m, const optim::State& s, const nn::MLP& g) {
    auto [u, s2] = opt.update(g, s, m);
    return std::pair{optim::apply_updates(m, u), s2};
  });
  nn::MLP model = group.broadcast(nn::MLP(kIn, kOut, kWidth, kDepth, random::key(0)));
  optim::State state = opt.init(optim::gradient_template(model));
  const Array key = random::fold_in(random::key(1), static_cast<std::uint32_t>(group.rank()));
  const Array x = random::normal(random::fold_in(key, 0), {kBatch, kIn});
  const Array y = random::randint(random::fold_in(key, 1), {kBatch}, 0, kOut);
  double grad_s = 0, reduce_s = 0, update_s = 0;
  Clock::time_point start;
  for (int i = -3; i < steps; ++i) {  // 3 warm-up steps (tracing, compiling)
    if (i == 0) {
      group.barrier();
      start = Clock::now();
      grad_s = reduce_s = update_s = 0;
    }
    auto t = Clock::now();
    auto [l, g] = grad_step(model, x, y);
    grad_s += since(t);
    t = Clock::now();
    g = group.all_reduce_mean(g);
    reduce_s += since(t);
    t = Clock::now();
    std::tie(model, state) = update(model, state, g);
    update_s += since(t);
  }
  const double step_s = since(start) / steps;
  std::size_t param_bytes = 0;
  for (const Array& a : tree::leaves(model)) param_bytes += a.nbytes();
  if (report) {
    std::printf(
        "train world=%d params_mb=%.2f step_ms=%.2f grad_ms=%.2f allreduce_ms=%.2f "
        "update_ms=%.2f samples_per_s=%.0f\n",
        world, param_bytes / 1048576.0, step_s * 1e3, grad_s / steps * 1e3, reduce_s / steps * 1e3,
        update_s / steps * 1e3, world * kBatch / step_s);
  }
  if (world == 1) return 0;

  // The raw peer: one Gloo context of its own over the same rendezvous.
  gloo::rendezvous::FileStore files(std::getenv("KILN_DIST_STORE"));
  gloo::rendezvous::PrefixStore store("raw", files);
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = gloo::transport::tcp::CreateDevice(attr);
  auto raw = std::make_shared<gloo::rendezvous::Context>(group.rank(), world);
  raw->connectFullMesh(store, device);
  std::uint32_t tag = 1u << 20;

  // The fixed cost every collective starts with: the agreement allgather (a
  // barrier is exactly that).
  std::vector<double> barrier_s;
  for (int r = 0; r < 50; ++r) {
    const auto t = Clock::now();
    group.barrier();
    barrier_s.push_back(since(t));
  }
  if (report) std::printf("barrier world=%d us=%.1f\n", world, median(barrier_s) * 1e6);

  for (const int mb : {1, 4, 16, 64}) {
    const std::int64_t n = mb * 1048576 / 4;
    const std::vector<Array> tree{full({n}, 1.0 + group.rank())};
    std::vector<float> flat(static_cast<std::size_t>(n), 1.0f);
    std::vector<double> kiln_s, raw_s, raw_bucketed_s, stage_s, comm_s, unstage_s;
    const int reps = mb >= 16 ? 3 : 7;
    for (int r = 0; r < reps; ++r) {
      group.barrier();
      auto t = Clock::now();
      const auto out = group.all_reduce_mean(tree);
      kiln_s.push_back(since(t));
      const dist::Stats& s = group.last_stats();
      stage_s.push_back(s.stage_s);
      comm_s.push_back(s.reduce_s);
      unstage_s.push_back(s.unstage_s);
      // Raw Gloo: the whole buffer in one allreduce, then in bucket-sized
      // allreduces (what kiln's buckets cost in Gloo alone).
      for (const bool bucketed : {false, true}) {
        const std::size_t chunk = bucketed ? group.options().bucket_bytes / 4 : flat.size();
        group.barrier();
        t = Clock::now();
        for (std::size_t at = 0; at < flat.size(); at += chunk) {
          gloo::AllreduceOptions o(raw);
          o.setOutput(flat.data() + at, std::min(chunk, flat.size() - at));
          o.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, std::size_t)>(
              &gloo::sum<float>));
          o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
          o.setTag(tag++);
          gloo::allreduce(o);
        }
        (bucketed ? raw_bucketed_s : raw_s).push_back(since(t));
      }
    }
    if (report) {
      std::printf(
          "allreduce world=%d mb=%d kiln_ms=%.2f raw_gloo_ms=%.2f raw_bucketed_ms=%.2f "
          "stage_ms=%.2f comm_ms=%.2f unstage_ms=%.2f buckets=%zu\n",
          world, mb, median(kiln_s) * 1e3, median(raw_s) * 1e3, median(raw_bucketed_s) * 1e3,
          median(stage_s) * 1e3, median(comm_s) * 1e3, median(unstage_s) * 1e3,
          group.last_stats().buckets);
    }
  }
  group.barrier();
  return 0;
}

std::string field(const std::string& line, const std::string& name) {
  const auto at = line.find(" " + name + "=");
  if (at == std::string::npos) return "-";
  const auto begin = at + name.size() + 2;
  return line.substr(begin, line.find(' ', begin) - begin);
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("KILN_RANK") != nullptr) return rank_main(std::atoi(argv[2]));

  std::vector<int> worlds{1, 2, 4};
  if (argc > 1) {
    worlds.clear();
    std::stringstream s(argv[1]);
    for (std::string w; std::getline(s, w, ',');) worlds.push_back(std::stoi(w));
  }
  const std::string steps = argc > 2 ? argv[2] : "30";
  std::printf(
      "dist_bench: %u hardware threads, KILN_DEVICE=cpu, OPENBLAS_NUM_THREADS=1 and KILN_NUM_THREADS=1 per rank, "
      "per-rank batch %lld, MLP %lld-%lldx%lld-%lld, adam\n",
      std::thread::hardware_concurrency(), static_cast<long long>(kBatch),
      static_cast<long long>(kIn), static_cast<long long>(kWidth), static_cast<long long>(kDepth),
      static_cast<long long>(kOut));
  std::vector<std::string> train, reduce, barrier;
  for (int world : worlds) {
    dist::LaunchOptions options;
    options.env = {"KILN_DEVICE=cpu", "OPENBLAS_NUM_THREADS=1", "KILN_NUM_THREADS=1"};
    options.timeout = std::chrono::seconds(120);
    const auto result = dist::launch_local(world, {argv[0], "rank", steps}, options);
    if (!result.ok()) {
      std::cerr << result.summary();
      return 1;
    }
    std::stringstream out(result.ranks[0].output);
    for (std::string line; std::getline(out, line);) {
      if (line.rfind("train ", 0) == 0) train.push_back(line);
      if (line.rfind("allreduce ", 0) == 0) reduce.push_back(line);
      if (line.rfind("barrier ", 0) == 0) barrier.push_back(line);
    }
  }
  double base = 0;
  std::printf("\n%-6s %9s %9s %12s %10s %12s %10s\n", "ranks", "step ms", "grad ms", "allreduce ms",
              "update ms", "samples/s", "vs 1 rank");
  for (const std::string& l : train) {
    const double sps = std::stod(field(l, "samples_per_s"));
    if (field(l, "world") == "1") base = sps;
    std::printf("%-6s %9s %9s %12s %10s %12.0f %9.2fx\n", field(l, "world").c_str(),
                field(l, "step_ms").c_str(), field(l, "grad_ms").c_str(),
                field(l, "allreduce_ms").c_str(), field(l, "update_ms").c_str(), sps,
                base > 0 ? sps / base : 0.0);
  }
  std::printf("\n%-6s %6s %9s %9s %12s %9s %10s %9s %9s %11s %8s\n", "ranks", "MB", "kiln ms",
              "raw ms", "raw bkt ms", "kiln/raw", "ms per MB", "stage ms", "comm ms", "unstage ms",
              "buckets");
  for (const std::string& l : reduce) {
    const double k = std::stod(field(l, "kiln_ms")), r = std::stod(field(l, "raw_gloo_ms"));
    const double mb = std::stod(field(l, "mb"));
    std::printf("%-6s %6s %9.2f %9.2f %12s %8.2fx %10.2f %9s %9s %11s %8s\n",
                field(l, "world").c_str(), field(l, "mb").c_str(), k, r,
                field(l, "raw_bucketed_ms").c_str(), k / r, k / mb, field(l, "stage_ms").c_str(),
                field(l, "comm_ms").c_str(), field(l, "unstage_ms").c_str(),
                field(l, "buckets").c_str());
  }
  for (const std::string& l : barrier) {
    std::printf("barrier (the agreement check every collective starts with), %s ranks: %s us\n",
                field(l, "world").c_str(), field(l, "us").c_str());
  }
  return 0;
}
