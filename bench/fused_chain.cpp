// Fused vs unfused elementwise kernels through Executable (plain chrono timing):
// 1. a 16-op elementwise chain over n f32 elements (with a broadcast row), with
//    and without transcendentals, and an activation chain (GELU, softplus,
//    sigmoid: tanh, exp, log, logistic), and conversions with i32 arithmetic,
// 2. a matmul with a bias + relu epilogue, a row softmax (reduction prologues),
// 3. one SGD training step of a 2-layer MLP (forward, grad, update), traced once.
// Prints launches per run and milliseconds per run with fusion on and off.
//   build/bench/fused_chain [n] [iterations]
//                           [chain|arith|gelu|convert|epilogue|softmax|mlp]
//                           [--json] [--fused-only]
// (KILN_DEVICE picks the device; the third argument runs one case only).
// --json prints one JSON object per case instead (bench/peers.py reads it), with
// the fused program's GB/s (bytes of its inputs read and outputs written once),
// its CPU ms per run (the process's, all threads)
// and, for the elementwise cases, host memcpy's GB/s over the same n floats (one
// read and one write stream: the limit for a streaming kernel; lavapipe runs on
// the host, so it is the limit there too).
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>
#include <kiln/dsl/executable.hpp>
#include <kiln/dsl/trace.hpp>
#include <kiln/kiln.hpp>

#include "json_text.hpp"

using namespace kiln;

namespace {

using kiln_bench::escaped;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// This process's CPU time (all its threads), in seconds.
double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// ms per run of `e` on copies of `inputs` (the inputs are consumed per run);
// `cpu_ms`, when given, gets the process's CPU ms per run over the same loop
// (what a shared machine's scheduling does not inflate).
double time_runs(const Executable& e, const std::vector<Array>& inputs, int iters,
                 RunStats* stats, double* cpu_ms = nullptr) {
  const auto once = [&] {
    std::vector<Array> in = inputs;
    std::vector<Array> out = e.run(in, stats);
    synchronize(e.device());
  };
  once();  // warm-up: kernels compiled, buffers cached
  const double c0 = cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) once();
  const double wall = seconds_since(t0) * 1e3 / iters;
  if (cpu_ms != nullptr) *cpu_ms = (cpu_seconds() - c0) * 1e3 / iters;
  return wall;
}

bool json = false;
Device target;  // where the programs run (KILN_DEVICE's default device)
bool fused_only = false;  // --fused-only: skip the unfused and elementwise-only runs

// GB/s of memcpy over n floats: the median copy of a >= 0.2 s loop (at least 5
// copies; the first, which faults dst in, is not counted); 2 streams of n * 4 bytes.
double memcpy_gbs(std::int64_t n) {
  std::vector<float> src(static_cast<std::size_t>(n), 1.0f), dst(static_cast<std::size_t>(n));
  std::memcpy(dst.data(), src.data(), dst.size() * sizeof(float));
  std::vector<double> seconds;
  const auto start = std::chrono::steady_clock::now();
  while (seconds.size() < 5 || (seconds_since(start) < 0.2 && seconds.size() < 100000)) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(dst.data(), src.data(), dst.size() * sizeof(float));
    seconds.push_back(seconds_since(t0));
    if (dst[seconds.size() % dst.size()] != 1.0f) std::abort();  // the copy is used
  }
  std::nth_element(seconds.begin(), seconds.begin() + seconds.size() / 2, seconds.end());
  return 2.0 * static_cast<double>(n) * sizeof(float) / seconds[seconds.size() / 2] / 1e9;
}


void compare(const char* what, const Program& p, const std::vector<Array>& inputs, int iters,
             std::int64_t stream_n = 0) {
  const Executable fused(p, target, what, FusionOptions{true, true});
  const Executable plain(p, target, what, FusionOptions{true, false});
  const Executable unfused(p, target, what, FusionOptions{false});
  RunStats fs, ps, us;
  const double tu = fused_only ? 0.0 : time_runs(unfused, inputs, iters, &us);
  const double tp = fused_only ? 0.0 : time_runs(plain, inputs, iters, &ps);
  double cpu = 0;
  const double tf = time_runs(fused, inputs, iters, &fs, &cpu);
  if (json) {
    std::size_t bytes = 0;  // inputs read and outputs written once
    for (const Array& a : inputs) bytes += a.nbytes();
    for (const ValueId v : p.outputs) {
      bytes += static_cast<std::size_t>(numel(p.avals[v].shape)) * size_of(p.avals[v].dtype);
    }
    const DeviceInfo* info = nullptr;
    const std::vector<DeviceInfo> all = devices();
    for (const DeviceInfo& d : all) {
      if (d.device == target) info = &d;
    }
    std::cout << "{\"case\": \"" << what << "\", \"device\": \""
              << target.to_string() << "\", \"device_name\": \""
              << escaped(info ? info->name : "") << "\", \"device_type\": \""
              << escaped(info ? info->type : "") << "\", \"iterations\": " << iters
              << ", \"bytes\": " << bytes;
    if (!fused_only) {
      std::cout << ", \"unfused_ms\": " << tu << ", \"unfused_launches\": " << us.launches;
    }
    std::cout << ", \"fused_ms\": " << tf << ", \"fused_cpu_ms\": " << cpu
              << ", \"fused_launches\": " << fs.launches
              << ", \"fused_gbs\": " << static_cast<double>(bytes) / (tf * 1e-3) / 1e9;
    if (stream_n > 0) {
      std::cout << ", \"n\": " << stream_n
                << ", \"memcpy_gbs\": " << memcpy_gbs(stream_n);
    }
    std::cout << "}" << std::endl;
    return;
  }
  std::cout << what << " on " << target.to_string() << ": unfused "
            << us.launches << " launches " << tu << " ms; elementwise fusion " << ps.launches
            << " launches " << tp << " ms; + matmul epilogues/reduction prologues "
            << fs.launches << " launches " << tf << " ms (x" << tu / tf << ")\n";
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> pos;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--json") {
      json = true;
    } else if (std::string(argv[i]) == "--fused-only") {
      fused_only = true;
    } else {
      pos.emplace_back(argv[i]);
    }
  }
  const std::int64_t n = pos.size() > 0 ? std::atoll(pos[0].c_str()) : (1 << 20);
  const int iters = pos.size() > 1 ? std::atoi(pos[1].c_str()) : 20;
  const std::string only = pos.size() > 2 ? pos[2] : "";
  const auto run = [&](const char* name) { return only.empty() || only == name; };
  const Device d = default_device();
  // Inputs are drawn on the CPU and copied to d (drawing 16M normals on lavapipe
  // takes longer than the benchmark); programs are traced and run on d.
  target = d;
  set_default_device(Device::cpu());
  const Array keys = random::split(random::key(0), 8);
  auto k = [&](int i) { return reshape(slice_axis(keys, 0, i, i + 1), {2}); };

  if (run("chain")) {  // 1. the chain: x (n/1024, 1024), bias (1024)
    const Shape s{n / 1024, 1024};
    Program p;
    {
      Trace t;
      Array x = t.input({f32, s}, d, "x");
      Array b = t.input({f32, {1024}}, d, "b");
      Array h = x * 1.5f + b;
      h = tanh(h) * 0.5f + relu(x - b);
      h = where(h > 0.25f, h * h, -h) / (abs(x) + 1.0f);
      const Array out = exp(-h);
      p = t.finish(std::span<const Array>(&out, 1));
    }
    optimize(p);
    compare("chain", p,
            {to_device(random::normal(k(0), s), d), to_device(random::normal(k(1), {1024}), d)},
            iters, n);
  }
  if (run("arith")) {  // 1b. the same without transcendentals (memory traffic dominates)
    const Shape s{n / 1024, 1024};
    Program p;
    {
      Trace t;
      Array x = t.input({f32, s}, d, "x");
      Array b = t.input({f32, {1024}}, d, "b");
      Array h = x * 1.5f + b;
      h = maximum(h, 0.0f) * 0.5f + (x - b);
      h = where(h > 0.25f, h * h, -h) / (abs(x) + 1.0f);
      const Array out = h * h - 1.0f;
      p = t.finish(std::span<const Array>(&out, 1));
    }
    optimize(p);
    compare("arith chain", p,
            {to_device(random::normal(k(0), s), d), to_device(random::normal(k(1), {1024}), d)},
            iters, n);
  }
  if (run("gelu")) {  // 1b'. activations of a training step: GELU (tanh form), softplus, sigmoid
    const Shape s{n / 1024, 1024};
    Program p;
    {
      Trace t;
      Array x = t.input({f32, s}, d, "x");
      Array b = t.input({f32, {1024}}, d, "b");
      Array h = x + b;
      Array gelu = 0.5f * h * (1.0f + tanh(0.7978846f * (h + 0.044715f * h * h * h)));
      Array softplus = maximum(h, 0.0f) + log(1.0f + exp(-abs(h)));
      const Array out = gelu * sigmoid(h) - softplus;
      p = t.finish(std::span<const Array>(&out, 1));
    }
    optimize(p);
    compare("gelu chain", p,
            {to_device(random::normal(k(0), s), d), to_device(random::normal(k(1), {1024}), d)},
            iters, n);
  }
  if (run("convert")) {  // 1b''. conversions and i32 arithmetic (quantize-like)
    const Shape s{n / 1024, 1024};
    Program p;
    {
      Trace t;
      Array x = t.input({f32, s}, d, "x");
      Array b = t.input({f32, {1024}}, d, "b");
      Array h = x * 1.5f + b;
      Array q = astype(h * 64.0f, i32) + astype(h > 0.0f, i32);
      const Array out = astype(q, f32) * (1.0f / 64.0f) - h;
      p = t.finish(std::span<const Array>(&out, 1));
    }
    optimize(p);
    compare("convert chain", p,
            {to_device(random::normal(k(0), s), d), to_device(random::normal(k(1), {1024}), d)},
            iters, n);
  }
  if (run("epilogue")) {  // 1c. relu(x @ w + b): a matmul epilogue
    Program p;
    {
      Trace t;
      Array x = t.input({f32, {1024, 512}}, d, "x");
      Array w = t.input({f32, {512, 512}}, d, "w");
      Array b = t.input({f32, {512}}, d, "b");
      const Array out = relu(matmul(x, w) + b);
      p = t.finish(std::span<const Array>(&out, 1));
    }
    optimize(p);
    compare("matmul+bias+relu", p,
            {to_device(random::normal(k(0), {1024, 512}), d),
             to_device(random::normal(k(1), {512, 512}), d),
             to_device(random::normal(k(2), {512}), d)},
            iters);
  }
  if (run("softmax")) {  // 1d. softmax rows: reduction prologues
    const Shape s{n / 1024, 1024};
    Program p;
    {
      Trace t;
      Array x = t.input({f32, s}, d, "x");
      Array e = exp(x - max(x, 1, true));
      const Array out = e / sum(e, 1, true);
      p = t.finish(std::span<const Array>(&out, 1));
    }
    optimize(p);
    compare("softmax", p, {to_device(random::normal(k(0), s), d)}, iters, n);
  }
  if (run("mlp")) {  // 2. an MLP training step (batch 256, 784 -> 256 -> 10, softmax cross-entropy, SGD)
    auto loss = [](const std::vector<Array>& w, const Array& x, const Array& y) {
      Array h = relu(matmul(x, w[0]) + w[1]);
      return nn::softmax_cross_entropy_with_integer_labels(matmul(h, w[2]) + w[3], y);
    };
    const std::vector<Aval> avals = {{f32, {784, 256}}, {f32, {256}}, {f32, {256, 10}},
                                     {f32, {10}}, {f32, {256, 784}}, {i32, {256}}};
    Program p;
    {
      Trace t;
      std::vector<Array> in;
      for (std::size_t i = 0; i < avals.size(); ++i) in.push_back(t.input(avals[i], d));
      const std::vector<Array> w(in.begin(), in.begin() + 4);
      auto [l, g] = value_and_grad(loss)(w, in[4], in[5]);
      std::vector<Array> outs = {l};
      for (std::size_t i = 0; i < 4; ++i) outs.push_back(w[i] - g[i] * 0.01f);
      p = t.finish(outs);
    }
    optimize(p);
    std::vector<Array> inputs;
    for (std::size_t i = 0; i < 5; ++i) {
      inputs.push_back(to_device(random::normal(k(2 + static_cast<int>(i)), avals[i].shape), d) *
                       0.05f);
    }
    inputs.push_back(to_device(random::randint(k(7), {256}, 0, 10), d));
    compare("mlp step", p, inputs, iters);
  }
  return 0;
}
