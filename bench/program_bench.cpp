// Time of one call of a compiled (traced) program, run through Executable and
// waited for with kiln::synchronize: the median of several calls after a warm-up,
// as wall time and as CPU time of the whole process (all threads: on lavapipe the
// device is these CPU threads, so CPU time says what the call cost even when
// other processes compete for the cores).
//   build/bench/program_bench [repetitions]   (KILN_DEVICE picks the device)
// Programs:
//   chain50: 50 dependent elementwise ops on 1M f32 (x*a, +b, tanh, ... in turn)
//   wide50:  50 independent elementwise ops on 1M f32 (50 outputs)
//   mlp:     4 layers of matmul + bias + relu, batch 256, width 512
//   small200: 200 dependent elementwise ops on 4096 f32 (bound by per-dispatch,
//            per-barrier and per-submit costs, not by memory)
// KILN_FUSION=0 is implied: fusion has no Vulkan kernel yet, so every equation is
// one dispatch either way.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <kiln/kiln.hpp>
#include <string>
#include <vector>

#ifndef KILN_BENCH_NO_STREAM_STATS  // defined to build against kiln before StreamStats
#include "kiln/backends/vulkan/context.hpp"
#include "kiln/backends/vulkan/stream.hpp"
#endif
#include "kiln/dsl/executable.hpp"
#include "kiln/dsl/trace.hpp"

using namespace kiln;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double cpu_ms() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return (static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e3) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-3;
}

double page_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_minflt + u.ru_majflt);
}

// KILN_BENCH_ONLY=name runs one program.
bool selected(const char* name) {
  const char* only = std::getenv("KILN_BENCH_ONLY");
  return only == nullptr || std::string(only) == name;
}

Array uniform(int seed, const Shape& shape, Device d) {
  return to_device(random::uniform(random::key(static_cast<std::uint32_t>(seed)), shape), d);
}

// Traces `f` over inputs of the given avals and returns the compiled program.
Program trace(const std::vector<Aval>& avals, Device d,
              const std::function<std::vector<Array>(const std::vector<Array>&)>& f) {
  Trace t;
  std::vector<Array> xs;
  for (std::size_t i = 0; i < avals.size(); ++i) {
    xs.push_back(t.input(avals[i], d, "x" + std::to_string(i)));
  }
  std::vector<Array> outs = f(xs);
  return t.finish(outs);
}

void time_program(const std::string& name, const Program& p, Device d,
                  const std::vector<Array>& inputs, int reps) {
  if (!selected(name.c_str())) return;
  Executable e(p, d, name, FusionOptions{.enabled = false});
  auto call = [&] {
    std::vector<Array> in = inputs;
    std::vector<Array> out = e.run(in);
    synchronize(d);
    return out;
  };
  (void)call();  // warm-up: kernels compile
  std::string counts;
#ifndef KILN_BENCH_NO_STREAM_STATS
  if (d.kind == Device::Kind::kVulkan) {
    const vk::StreamStats s0 = vk::Context::get(d.index).stream().stats();
    (void)call();
    const vk::StreamStats s1 = vk::Context::get(d.index).stream().stats();
    char buf[200];
    std::snprintf(buf, sizeof buf, "; per call: %zu submits, %zu dispatches, %zu barriers, %zu reused",
                  s1.submits - s0.submits, s1.dispatches - s0.dispatches,
                  s1.barriers - s0.barriers, s1.reused - s0.reused);
    counts = buf;
  }
#endif
  std::vector<double> ms, cpu, faults;
  for (int r = 0; r < reps; ++r) {
    const double f0 = page_faults();
    const double c0 = cpu_ms();
    const auto t0 = std::chrono::steady_clock::now();
    (void)call();
    ms.push_back(std::chrono::duration<double, std::milli>(
                     std::chrono::steady_clock::now() - t0).count());
    cpu.push_back(cpu_ms() - c0);
    faults.push_back(page_faults() - f0);
  }
  std::printf("%-9s %3zu steps  median %8.2f ms wall (min %.2f, max %.2f), %8.2f ms cpu, %.0f page faults; "
              "%d runs, %s%s\n",
              name.c_str(), e.steps().size(), median(ms), *std::min_element(ms.begin(), ms.end()),
              *std::max_element(ms.begin(), ms.end()), median(cpu), median(faults), reps,
              d.to_string().c_str(), counts.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 9;
  const Device d = default_device();
  const std::int64_t n = 1 << 20;
  const Aval vec{f32, {n}};
  {
    const std::vector<Array> in = {uniform(1, {n}, d), uniform(2, {n}, d), uniform(3, {n}, d)};
    const Program chain = trace({vec, vec, vec}, d, [](const std::vector<Array>& x) {
      Array y = x[0];
      for (int i = 0; i < 50; ++i) {
        switch (i % 5) {
          case 0: y = y * x[1]; break;
          case 1: y = y + x[2]; break;
          case 2: y = tanh(y); break;
          case 3: y = maximum(y, x[1]); break;
          default: y = y - x[2]; break;
        }
      }
      return std::vector<Array>{y};
    });
    time_program("chain50", chain, d, in, reps);
    const Program wide = trace({vec, vec, vec}, d, [](const std::vector<Array>& x) {
      std::vector<Array> outs;
      for (int i = 0; i < 50; ++i) {
        const Array& a = x[static_cast<std::size_t>(i % 3)];
        const Array& b = x[static_cast<std::size_t>((i / 3 + 1 + i % 3) % 3)];
        switch (i % 4) {
          case 0: outs.push_back(a * b); break;
          case 1: outs.push_back(a + b); break;
          case 2: outs.push_back(maximum(a, b)); break;
          default: outs.push_back(a - b); break;
        }
      }
      return outs;
    });
    time_program("wide50", wide, d, in, reps);
  }
  {
    const Aval small{f32, {4096}};
    const std::vector<Array> in = {uniform(4, {4096}, d), uniform(5, {4096}, d)};
    const Program chain = trace({small, small}, d, [](const std::vector<Array>& x) {
      Array y = x[0];
      for (int i = 0; i < 200; ++i) y = i % 2 == 0 ? y * x[1] : tanh(y);
      return std::vector<Array>{y};
    });
    time_program("small200", chain, d, in, reps);
  }
  {
    const std::int64_t batch = 256, width = 512, layers = 4;
    std::vector<Aval> avals = {Aval{f32, {batch, width}}};
    std::vector<Array> in = {uniform(10, {batch, width}, d)};
    for (int l = 0; l < layers; ++l) {
      avals.push_back(Aval{f32, {width, width}});
      avals.push_back(Aval{f32, {width}});
      in.push_back(uniform(20 + l, {width, width}, d) * to_device(full({}, 0.05), d));
      in.push_back(uniform(40 + l, {width}, d));
    }
    const Program mlp = trace(avals, d, [&](const std::vector<Array>& x) {
      Array h = x[0];
      for (std::size_t l = 0; l < static_cast<std::size_t>(layers); ++l) {
        h = relu(matmul(h, x[1 + 2 * l]) + x[2 + 2 * l]);
      }
      return std::vector<Array>{h};
    });
    time_program("mlp", mlp, d, in, reps);
  }
}
