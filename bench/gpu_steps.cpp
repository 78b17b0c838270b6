// kiln's side of the GPU table (issue 40): the cases bench/peers/gpu_peers.py
// runs in PyTorch and JAX, with the same definitions, sizes and timing, one JSON
// object per case on stdout (bench/run_gpu.py joins them into one table):
//   matmul            C = A @ B, (n, n) f32 / f16 / bf16 (f16 and bf16 accumulate
//                     in f32); a sample times k back-to-back products and a
//                     synchronize, divided by k (k = ceil(2e12 / 2n^3): >= ~20 ms
//                     of work on a GPU)
//   mlp_step          1024-4096-4096-1000 ReLU MLP, batch 2048, softmax
//                     cross-entropy, one Adam step (filter_jit, donated)
//   cnn_step          bench/cnn_step.cpp's CNN at batch 512, one Adam step
//   transformer_step  one nn::TransformerBlock (embed 512, 8 heads, MLP 2048,
//                     RoPE, causal), batch 16 x 512 tokens, loss mean(y^2), Adam
// Embedding gradient and sort are bench/ops_bench's cases. Each case: 5 warm-up
// calls (trace, compile, the allocator's kept blocks), then --reps timed samples (median reported); a step
// sample ends when its loss is read on the host.
//   build/bench/gpu_steps [--cases matmul,mlp,cnn,transformer] [--sizes 1024,...]
//                         [--dtypes f32,f16,bf16] [--reps 5] [--small] [--profile]
// KILN_DEVICE picks the device (vulkan on the GPU machine); --small divides the
// sizes down so lavapipe runs every case in seconds (CI does not run this);
// --profile prints each case's Vulkan kernel profile of its timed samples to
// stderr (kiln/backends/vulkan/profile.hpp).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <kiln/backends/vulkan/profile.hpp>
#include <kiln/kiln.hpp>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "cnn_model.hpp"

using namespace kiln;

namespace {

struct Options {
  std::vector<std::string> cases{"matmul", "mlp", "cnn", "transformer"};
  std::vector<std::int64_t> sizes{1024, 2048, 4096, 8192};
  std::vector<std::string> dtypes{"f32", "f16", "bf16"};
  int reps = 5;
  bool small = false;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, ',');) {
    if (!part.empty()) out.push_back(part);
  }
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string samples_json(const std::vector<double>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

DeviceInfo info() {
  const Device d = default_device();
  for (const DeviceInfo& i : devices()) {
    if (i.device == d) return i;
  }
  DeviceInfo none;
  none.device = d;
  return none;
}

std::string head(const std::string& c, const std::string& dtype) {
  return "{\"case\": \"" + c + "\", \"impl\": \"kiln\", \"dtype\": \"" + dtype +
         "\", \"device\": \"" + default_device().to_string() + " (" + info().name + ")\"";
}

// Runs `once` 5 times untimed, then `reps` timed samples. With --profile the
// Vulkan kernel profile covers the timed samples only, and goes to stderr.
bool g_profile = false;
std::vector<double> timed(int reps, const std::function<void()>& once) {
  for (int i = 0; i < 5; ++i) once();
  const Device d = default_device();
  const bool profile = g_profile && d.kind == Device::Kind::kVulkan;
  if (profile) {
    synchronize(d);
    vulkan::set_profiling(d, true);
    vulkan::reset_profile(d);
  }
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    once();
    ms.push_back(ms_since(t0));
  }
  if (profile) {
    synchronize(d);
    std::cerr << vulkan::profile_report(d) << "(" << reps << " timed samples)\n";
    vulkan::set_profiling(d, false);
  }
  return ms;
}

void error_line(const std::string& c, const std::string& dtype, std::int64_t n, std::string what) {
  std::replace(what.begin(), what.end(), '"', '\'');
  std::replace(what.begin(), what.end(), '\n', ' ');
  std::cout << head(c, dtype) << ", \"n\": " << n << ", \"error\": \"" << what << "\"}"
            << std::endl;
}

void matmul_case(const Options& o) {
  const Device d = default_device();
  for (const std::string& dt : o.dtypes) {
    const DType dtype = dt == "f16" ? f16 : dt == "bf16" ? bf16 : f32;
    for (std::int64_t n : o.sizes) {
      try {
        const Array a = astype(to_device(random::normal(random::key(0), {n, n}), d), dtype);
        const Array b = astype(to_device(random::normal(random::key(1), {n, n}), d), dtype);
        const double flop = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
        // k products per sample: the peers' ceil(2e12 / 2n^3), fewer where one
        // product already takes more than 20 ms / k here (a slow device).
        int k = static_cast<int>(std::max(1.0, std::ceil(2e12 / flop)));
        const auto once = [&](int times) {
          Array c;
          for (int i = 0; i < times; ++i) c = matmul(a, b);
          synchronize(d);
        };
        once(1);
        const auto t0 = std::chrono::steady_clock::now();
        once(1);
        k = std::clamp(static_cast<int>(std::ceil(20.0 / std::max(ms_since(t0), 1e-3))), 1, k);
        const std::vector<double> ms = timed(o.reps, [&] { once(k); });
        std::vector<double> per(ms.size());
        std::transform(ms.begin(), ms.end(), per.begin(), [&](double x) { return x / k; });
        const double med = median(per);
        std::cout << head("matmul", dt) << ", \"n\": " << n << ", \"k\": " << k
                  << ", \"ms\": " << med << ", \"tflops\": " << flop / (med * 1e9)
                  << ", \"samples\": " << samples_json(per) << "}" << std::endl;
      } catch (const std::exception& e) {
        error_line("matmul", dt, n, e.what());
      }
    }
  }
}

// A training step of `model` under filter_jit: value_and_grad + Adam, donated.
template <class Model, class Loss>
void step_case(const Options& o, const std::string& name, Model model, const Loss& loss_fn,
               const Array& x, const Array& y, const std::string& extras) {
  const auto opt = optim::adam(1e-3);
  optim::State state = opt.init(optim::gradient_template(model));
  auto step = filter_jit(
      [opt, loss_fn](const Model& m, const optim::State& s, const Array& x, const Array& y) {
        auto [loss, grads] = value_and_grad(loss_fn)(m, x, y);
        auto [updates, next] = opt.update(grads, s, m);
        return std::tuple{optim::apply_updates(m, updates), next, loss};
      },
      {.name = name, .arg_names = {"model", "opt_state", "x", "y"}});
  float loss = 0.0f;
  std::vector<double> host;  // until the call returns: tracing hit, recording, submit
  const std::vector<double> ms = timed(o.reps, [&] {
    Array l;
    const auto t0 = std::chrono::steady_clock::now();
    std::tie(model, state, l) = step(std::move(model), std::move(state), x, y);
    host.push_back(ms_since(t0));
    loss = l.item<float>();
  });
  host.erase(host.begin(), host.begin() + 5);  // the warm-up calls
  std::cout << head(name, "f32") << ", \"n\": null, " << extras << ", \"ms\": " << median(ms)
            << ", \"host_ms\": " << median(host) << ", \"final_loss\": " << loss << ", \"samples\": " << samples_json(ms) << "}"
            << std::endl;
}

Array key_at(const Array& keys, int i) { return reshape(slice_axis(keys, 0, i, i + 1), {2}); }

struct Mlp {
  nn::Linear l1, l2, l3;
  KILN_MODULE(Mlp, l1, l2, l3);
  Array operator()(const Array& x) const { return l3(relu(l2(relu(l1(x))))); }
};

void mlp_case(const Options& o) {
  const std::int64_t batch = o.small ? 64 : 2048, in = o.small ? 64 : 1024,
                     hidden = o.small ? 256 : 4096, out = o.small ? 100 : 1000;
  const Array keys = random::split(random::key(0), 3);
  Mlp model{nn::Linear(in, hidden, key_at(keys, 0)), nn::Linear(hidden, hidden, key_at(keys, 1)),
            nn::Linear(hidden, out, key_at(keys, 2))};
  std::vector<float> xs(static_cast<std::size_t>(batch * in));
  for (std::size_t j = 0; j < xs.size(); ++j) xs[j] = static_cast<float>(j % 251) / 251.0f;
  std::vector<std::int32_t> ys(static_cast<std::size_t>(batch));
  for (std::size_t i = 0; i < ys.size(); ++i) ys[i] = static_cast<std::int32_t>(i % out);
  const auto loss = [](const Mlp& m, const Array& x, const Array& y) {
    return nn::softmax_cross_entropy_with_integer_labels(m(x), y);
  };
  step_case(o, "mlp_step", model, loss, to_device(array<float>(xs, {batch, in}), default_device()),
            to_device(array<std::int32_t>(ys, {batch}), default_device()),
            "\"batch\": " + std::to_string(batch));
}

using kiln_bench::Cnn;

void cnn_case(const Options& o) {
  const std::int64_t batch = o.small ? 16 : 512;
  const Array keys = random::split(random::key(0), 3);
  Cnn model(keys);
  std::vector<float> xs(static_cast<std::size_t>(batch * 28 * 28));
  for (std::size_t j = 0; j < xs.size(); ++j) xs[j] = static_cast<float>(j % 251) / 251.0f;
  std::vector<std::int32_t> ys(static_cast<std::size_t>(batch));
  for (std::size_t i = 0; i < ys.size(); ++i) ys[i] = static_cast<std::int32_t>(i % 10);
  const auto loss = [](const Cnn& m, const Array& x, const Array& y) {
    return nn::softmax_cross_entropy_with_integer_labels(m(x), y);
  };
  step_case(o, "cnn_step", model, loss,
            to_device(array<float>(xs, {batch, 1, 28, 28}), default_device()),
            to_device(array<std::int32_t>(ys, {batch}), default_device()),
            "\"batch\": " + std::to_string(batch));
}

void transformer_case(const Options& o) {
  const std::int64_t batch = o.small ? 2 : 16, seq = o.small ? 32 : 512, embed = o.small ? 64 : 512,
                     heads = o.small ? 2 : 8;
  const nn::TransformerBlock block(embed, heads, random::key(0), {.mlp_size = 4 * embed});
  std::vector<float> xs(static_cast<std::size_t>(batch * seq * embed));
  for (std::size_t j = 0; j < xs.size(); ++j) {
    xs[j] = std::sin(0.01f * static_cast<float>(j % 1000));
  }
  const auto loss = [](const nn::TransformerBlock& m, const Array& x, const Array&) {
    const Array y = m(x);
    return mean(y * y);
  };
  step_case(o, "transformer_step", block, loss,
            to_device(array<float>(xs, {batch, seq, embed}), default_device()),
            to_device(zeros({1}), default_device()),
            "\"batch\": " + std::to_string(batch) + ", \"seq\": " + std::to_string(seq) +
                ", \"embed\": " + std::to_string(embed) + ", \"heads\": " + std::to_string(heads));
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  bool sizes_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--cases" && has_value) {
      o.cases = split(argv[++i]);
    } else if (a == "--sizes" && has_value) {
      o.sizes.clear();
      for (const std::string& s : split(argv[++i])) o.sizes.push_back(std::atoll(s.c_str()));
      sizes_given = true;
    } else if (a == "--dtypes" && has_value) {
      o.dtypes = split(argv[++i]);
    } else if (a == "--reps" && has_value) {
      o.reps = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--small") {
      o.small = true;
    } else if (a == "--profile") {
      g_profile = true;
    } else {
      std::cerr << "usage: gpu_steps [--cases matmul,mlp,cnn,transformer] [--sizes 1024,...] "
                   "[--dtypes f32,f16,bf16] [--reps N] [--small] [--profile]\n";
      return 2;
    }
  }
  if (o.small && !sizes_given) o.sizes = {64, 128};
  std::cout << "{\"case\": \"env\", \"impl\": \"kiln\", \"device\": \"" << default_device().to_string()
            << "\", \"name\": \"" << info().name << "\", \"driver\": \"" << info().driver
            << "\"}" << std::endl;
  for (const std::string& c : o.cases) {
    try {
      if (c == "matmul") {
        matmul_case(o);
      } else if (c == "mlp") {
        mlp_case(o);
      } else if (c == "cnn") {
        cnn_case(o);
      } else if (c == "transformer") {
        transformer_case(o);
      } else {
        std::cerr << "gpu_steps: unknown case " << c << "\n";
        return 2;
      }
    } catch (const std::exception& e) {
      error_line(c == "mlp" || c == "cnn" || c == "transformer" ? c + "_step" : c, "f32", 0, e.what());
    }
  }
  return 0;
}
