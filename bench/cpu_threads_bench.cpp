// Reductions, layout and index kernels on the CPU at 1 and more pool threads
// (issue 20, item 3): median wall and process CPU time per eager op over
// several runs (plain timing; the first run of each is a warm-up).
//   build/bench/cpu_threads_bench [runs] [threads...]   (default: 15 runs, 1 2)
// Prints one line per (op, threads): median wall ms, median CPU ms.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <kiln/kiln.hpp>
#include <string>
#include <vector>

using namespace kiln;

namespace {

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) +
         1e-9 * static_cast<double>(ts.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Array ramp(const Shape& shape) {
  std::vector<float> v(static_cast<std::size_t>(numel(shape)));
  for (std::size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<float>(i % 1013) * 1e-3f - 0.5f;
  return Array::from_data<float>(v, shape);
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::atoi(argv[1]) : 15;
  std::vector<int> threads;
  for (int i = 2; i < argc; ++i) threads.push_back(std::atoi(argv[i]));
  if (threads.empty()) threads = {1, 2};
  const Array x = ramp({2048, 2048});  // 4M f32
  const Array flat = reshape(x, {2048 * 2048});
  const Array row = ramp({1, 2048});
  std::vector<std::int32_t> ids(1 << 20);
  for (std::size_t i = 0; i < ids.size(); ++i)
    ids[i] = static_cast<std::int32_t>((i * 7919) % 2048);
  const Array idx = Array::from_data<std::int32_t>(
      ids, {static_cast<std::int64_t>(ids.size())});
  const Array upd = ramp({512, 2048});
  const Array idx512 = slice_axis(idx, 0, 0, 512);
  const Array table = ramp({32768, 64});  // an embedding gradient's shapes
  const Array tokens = slice_axis(idx, 0, 0, 8192);
  const Array token_grads = ramp({8192, 64});
  const std::vector<std::pair<std::string, std::function<Array()>>> ops = {
      {"exp (4M; elementwise, for scale)", [&] { return exp(x); }},
      {"sum axis 1 (2048x2048)", [&] { return sum(x, 1); }},
      {"sum axis 0 (2048x2048)", [&] { return sum(x, 0); }},
      {"sum all (4M)", [&] { return sum(flat); }},
      {"max all (4M)", [&] { return max(flat); }},
      {"argmax axis 1 (2048x2048)", [&] { return argmax(x, 1); }},
      {"argmax axis 0 (2048x2048)", [&] { return argmax(x, 0); }},
      {"argmax all (4M)", [&] { return argmax(flat); }},
      {"transpose (2048x2048)", [&] { return transpose(x); }},
      {"slice step 2 (2048x2048)",
       [&] {
         return slice(x, {0, 0}, {2048, 2048}, {1, 2});
       }},
      {"broadcast_to (1x2048 -> 2048x2048)",
       [&] {
         return broadcast_to(row, {2048, 2048});
       }},
      {"concatenate axis 1 (2x 2048x2048)",
       [&] {
         return concatenate({x, x}, 1);
       }},
      {"take rows (2048x2048 by 512)", [&] { return take(x, idx512, 0); }},
      {"scatter_add rows (512 into 2048x2048)",
       [&] { return scatter_add(x, idx512, upd, 0); }},
      {"scatter_add rows (8192 into 32768x64)",
       [&] { return scatter_add(table, tokens, token_grads, 0); }},
  };
  for (const auto& [label, op] : ops) {
    for (int t : threads) {
      set_num_threads(t);
      std::vector<double> wall, cpu;
      for (int r = 0; r <= runs; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        const double c0 = cpu_seconds();
        Array out = op();
        const double c1 = cpu_seconds();
        const std::chrono::duration<double> dt =
            std::chrono::steady_clock::now() - t0;
        if (r == 0) continue;  // warm-up
        wall.push_back(dt.count() * 1e3);
        cpu.push_back((c1 - c0) * 1e3);
      }
      std::printf("%-40s threads %d  wall %8.3f ms  cpu %8.3f ms\n",
                  label.c_str(), t, median(wall), median(cpu));
    }
  }
  return 0;
}
