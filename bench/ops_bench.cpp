// Issue-16 ops against their old forms and against peers (plain chrono timing,
// medians), one JSON object per case on stdout (bench/run_ops.py prints the
// table with the JAX/numpy rows measured in the same run):
//   embedding_grad  the gradient of an embedding lookup, vocab x dim table,
//                   `tokens` ids: through take's vjp (scatter_add) and, as
//                   before, through a one-hot matmul (the old vjp); ms and the
//                   program's peak bytes (RunStats::peak_bytes)
//   sort            sort of n f32 (argsort + gather), ms
//   math            each float transcendental (the kTranscendental rows of
//                   dsl/primitives.inc, and pow) on n f32 in [0.05, 0.95]
//                   (every op's domain), compiled: ms and GB/s of its reads
//                   and writes (issue 36: what kiln's own math costs)
//   build/bench/ops_bench [embedding_grad|sort|math] [--vocab V --dim D --tokens T --n N --reps R]
// KILN_DEVICE picks the device.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>
#include <kiln/kiln.hpp>

#include "kiln/dsl/primitive.hpp"

using namespace kiln;

namespace {

template <class F>
double median_ms(int reps, F&& once) {
  once();  // warm-up: traced, compiled, memory cached
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    once();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

std::int64_t arg(int argc, char** argv, const char* name, std::int64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::atoll(argv[i + 1]);
  }
  return fallback;
}

void embedding_grad(std::int64_t vocab, std::int64_t dim, std::int64_t tokens, int reps) {
  const Device d = default_device();
  std::mt19937 g(0);
  std::uniform_int_distribution<std::int32_t> pick(0, static_cast<std::int32_t>(vocab - 1));
  std::vector<std::int32_t> ids(static_cast<std::size_t>(tokens));
  for (auto& v : ids) v = pick(g);
  const Array idx = to_device(array<std::int32_t>(ids, {tokens}), d);
  const Array table = to_device(random::normal(random::key(1), {vocab, dim}), d);
  const Array weights = to_device(random::normal(random::key(2), {tokens, dim}), d);
  // The same loss, its gradient through take (scatter_add) or through the
  // one-hot matmul the old vjp built.
  auto gather_loss = [&](const Array& w) { return sum(take(w, idx, 0) * weights); };
  auto onehot_loss = [&](const Array& w) {
    return sum(matmul(one_hot(idx, vocab, f32), w) * weights);
  };
  auto scatter_step = filter_jit([&](const Array& w) { return grad(gather_loss)(w); });
  auto onehot_step = filter_jit([&](const Array& w) { return grad(onehot_loss)(w); });
  const auto report = [&](auto& step, bool scatter) {
    const double ms = median_ms(reps, [&] {
      Array out = step(table);
      synchronize(d);
    });
    std::cout << "{\"case\": \"embedding_grad\", \"variant\": \"" << (scatter ? "scatter_add" : "one_hot_matmul")
              << "\", \"device\": \"" << d.to_string() << "\", \"vocab\": " << vocab << ", \"dim\": " << dim
              << ", \"tokens\": " << tokens << ", \"ms\": " << ms
              << ", \"peak_bytes\": " << step.last_run().peak_bytes << "}" << std::endl;
  };
  report(scatter_step, true);
  try {
    report(onehot_step, false);
  } catch (const OutOfMemoryError& e) {  // the old form may not fit at all
    std::string what = e.what();
    std::replace(what.begin(), what.end(), '"', '\'');
    std::cout << "{\"case\": \"embedding_grad\", \"variant\": \"one_hot_matmul\", \"device\": \""
              << d.to_string() << "\", \"vocab\": " << vocab << ", \"dim\": " << dim
              << ", \"tokens\": " << tokens << ", \"error\": \"" << what << "\"}" << std::endl;
  }
}

void sort_case(std::int64_t n, int reps) {
  const Device d = default_device();
  const Array x = to_device(random::uniform(random::key(3), {n}), d);
  auto jitted = filter_jit([](const Array& a) { return sort(a); });
  const double ms = median_ms(reps, [&] {
    Array out = jitted(x);
    synchronize(d);
  });
  // Sorted and a permutation of the input (the sum is kept).
  const std::vector<float> s = jitted(x).to_vector<float>();
  if (!std::is_sorted(s.begin(), s.end())) {
    std::cerr << "ops_bench: sort result is not sorted\n";
    std::exit(1);
  }
  std::cout << "{\"case\": \"sort\", \"variant\": \"kiln\", \"device\": \"" << d.to_string()
            << "\", \"n\": " << n << ", \"ms\": " << ms << "}" << std::endl;
}

void math_case(std::int64_t n, int reps) {
  const Device d = default_device();
  const Array x = to_device(random::uniform(random::key(4), {n}, f32, 0.05, 0.95), d);
  const Array y = to_device(random::uniform(random::key(5), {n}, f32, -2.0, 2.0), d);
  for (const PrimInfo& info : all_prims()) {
    const Prim p = info.prim;
    const bool unary = family(p) == PrimFamily::kUnary && has_trait(p, PrimTrait::kTranscendental);
    if (!unary && p != Prim::kPow) continue;
    auto jitted = filter_jit([&](const Array& a, const Array& b) {
      std::vector<Array> in{a};
      if (!unary) in.push_back(b);
      return detail::bind(p, Params{}, in, a.aval());
    });
    const double ms = median_ms(reps, [&] {
      Array out = jitted(x, y);
      synchronize(d);
    });
    const double bytes = static_cast<double>(n) * 4.0 * (unary ? 2.0 : 3.0);
    std::cout << "{\"case\": \"math:" << name(p) << "\", \"variant\": \"kiln\", \"device\": \""
              << d.to_string() << "\", \"n\": " << n << ", \"ms\": " << ms
              << ", \"gbs\": " << bytes / ms * 1e-6 << "}" << std::endl;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string which = argc > 1 && argv[1][0] != '-' ? argv[1] : "all";
  const int reps = static_cast<int>(arg(argc, argv, "--reps", 5));
  if (which == "all" || which == "embedding_grad") {
    embedding_grad(arg(argc, argv, "--vocab", 32768), arg(argc, argv, "--dim", 64),
                   arg(argc, argv, "--tokens", 8192), reps);
  }
  if (which == "all" || which == "sort") sort_case(arg(argc, argv, "--n", 1 << 20), reps);
  if (which == "all" || which == "math") math_case(arg(argc, argv, "--n", 1 << 20), reps);
  return 0;
}
