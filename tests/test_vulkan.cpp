// The Vulkan backend against the CPU reference: every op family on random
// inputs over shapes with size-1 dims, sizes that are not multiples of the
// workgroup, and sizes above 65535 * 256 elements (2-D dispatch grids); plus the
// device listing, error paths and the kernel cache. Runs with KILN_VALIDATION=1
// in CI: a validation message fails the test at the next synchronisation.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <tuple>
#include <cstdint>
#include <kiln/kiln.hpp>
#include <random>
#include <vector>

#include "kiln/backends/vulkan/check.hpp"
#include "kiln/backends/vulkan/context.hpp"
#include "kiln/backends/vulkan/disk_cache.hpp"
#include "kiln/backends/vulkan/external.hpp"
#include "kiln/backends/vulkan/kernels.hpp"
#include "kiln/backends/vulkan/spirv.hpp"
#include "kiln/backends/vulkan/memory.hpp"
#include "kiln/backends/vulkan/pipeline.hpp"

using namespace kiln;

namespace {

const Device kGpu = Device::vulkan(0);

std::mt19937& rng() {
  static std::mt19937 g(1234);
  return g;
}

// Random values of `dtype` on the CPU: floats in [-3, 3], ints in [-50, 50].
Array host_random(const Shape& shape, DType dtype, double lo = -3, double hi = 3) {
  const auto n = static_cast<std::size_t>(numel(shape));
  std::uniform_real_distribution<double> u(lo, hi);
  switch (dtype) {
    case DType::kF32: {
      std::vector<float> v(n);
      for (auto& x : v) x = static_cast<float>(u(rng()));
      return Array::from_data<float>(v, shape);
    }
    case DType::kF64: {
      std::vector<double> v(n);
      for (auto& x : v) x = u(rng());
      return Array::from_data<double>(v, shape);
    }
    case DType::kI32: {
      std::vector<std::int32_t> v(n);
      for (auto& x : v) x = static_cast<std::int32_t>(std::lround(u(rng()) * 16));
      return Array::from_data<std::int32_t>(v, shape);
    }
    case DType::kU32: {
      std::vector<std::uint32_t> v(n);
      for (auto& x : v) x = static_cast<std::uint32_t>(std::lround(std::abs(u(rng())) * 16));
      return Array::from_data<std::uint32_t>(v, shape);
    }
    default: {
      std::vector<std::uint32_t> v(n);
      for (auto& x : v) x = u(rng()) > 0 ? 1u : 0u;
      return astype(Array::from_data<std::uint32_t>(v, shape), bool_);
    }
  }
}

std::vector<double> as_doubles(const Array& a) {
  const Array h = to_device(a, Device::cpu());
  std::vector<double> out;
  switch (h.dtype()) {
    case DType::kF32: for (float x : h.to_vector<float>()) out.push_back(x); break;
    case DType::kF64: out = h.to_vector<double>(); break;
    case DType::kI32: for (auto x : h.to_vector<std::int32_t>()) out.push_back(x); break;
    case DType::kU32: for (auto x : h.to_vector<std::uint32_t>()) out.push_back(x); break;
    case DType::kBool: for (bool x : h.to_vector<bool>()) out.push_back(x); break;
    default: FAIL("unexpected dtype"); break;
  }
  return out;
}

// The Vulkan result equals the CPU one: exactly for integers and bool, within
// `rtol` (relative, with an absolute floor) for floats; NaN matches NaN.
void check_same(const Array& gpu, const Array& cpu, double rtol = 2e-6) {
  REQUIRE(gpu.device() == kGpu);
  REQUIRE(cpu.device() == Device::cpu());
  REQUIRE(gpu.dtype() == cpu.dtype());
  REQUIRE(gpu.shape() == cpu.shape());
  const auto g = as_doubles(gpu), c = as_doubles(cpu);
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    const bool same = (std::isnan(g[i]) && std::isnan(c[i])) || g[i] == c[i] ||
                      (is_inexact(cpu.dtype()) &&
                       std::abs(g[i] - c[i]) <= rtol * std::max(1.0, std::abs(c[i])));
    if (!same && bad++ == 0) first = i;
  }
  CAPTURE(first);
  CAPTURE(g.empty() ? 0.0 : g[first]);
  CAPTURE(c.empty() ? 0.0 : c[first]);
  CHECK(bad == 0);
}

// Like check_same, for a result on any Vulkan device.
void check_close_to(const Array& gpu, const Array& cpu) {
  const auto g = as_doubles(gpu), c = as_doubles(cpu);
  REQUIRE(g.size() == c.size());
  for (std::size_t i = 0; i < g.size(); ++i) CHECK(g[i] == doctest::Approx(c[i]).epsilon(1e-5));
}

// Runs `f` on CPU copies and Vulkan copies of the inputs and compares.
template <class F>
void differential(const std::vector<Array>& host_inputs, F f, double rtol = 2e-6) {
  std::vector<Array> gpu;
  for (const auto& h : host_inputs) gpu.push_back(to_device(h, kGpu));
  check_same(f(gpu), f(host_inputs), rtol);
}

const std::vector<Shape> kShapes = {{}, {1}, {7}, {257}, {3, 1, 5}, {2, 3, 4}, {1000, 1},
                                    {5, 300}};

}  // namespace

TEST_CASE("kiln::devices() lists the CPU and the Vulkan device with its limits") {
  const auto all = devices();
  REQUIRE(all.size() >= 2);
  CHECK(all[0].device == Device::cpu());
  const DeviceInfo& v = all[1];
  CHECK(v.device == kGpu);
  CHECK(!v.name.empty());
  CHECK(v.error.empty());
  CHECK(v.max_workgroup_invocations >= 128);
  if (std::getenv("KILN_VK_MAX_GROUP_COUNT") == nullptr) {
    CHECK(v.max_workgroup_count[0] >= 65535);
  }
  CHECK(v.max_storage_buffer_range >= (1u << 27));
  CHECK(v.memory_bytes > 0);
  CHECK(v.bool_storage);
}

TEST_CASE("unary ops on Vulkan equal the CPU for f32 and f64 over many shapes") {
  using UnaryFn = Array (*)(const Array&);
  const std::pair<const char*, UnaryFn> ops[] = {
      {"neg", neg},   {"abs", abs},   {"exp", exp},     {"tanh", tanh},
      {"relu", relu}, {"sigmoid", sigmoid}};
  for (DType dt : {f32, f64}) {
    for (const auto& shape : kShapes) {
      for (auto [op_name, op] : ops) {
        CAPTURE(op_name);
        CAPTURE(dt);
        differential({host_random(shape, dt)}, [&](auto& x) { return op(x[0]); },
                     dt == f64 ? 1e-14 : 2e-6);
      }
      // log/sqrt/rsqrt on positive inputs
      const Array pos = host_random(shape, dt, 0.001, 50);
      differential({pos}, [](auto& x) { return log(x[0]); }, dt == f64 ? 1e-14 : 2e-6);
      differential({pos}, [](auto& x) { return sqrt(x[0]); });
      differential({pos}, [](auto& x) { return rsqrt(x[0]); });
    }
  }
}

TEST_CASE("f64 exp, log and tanh on Vulkan are accurate over their whole range") {
  std::vector<double> xs = {-745.0, -700.5, -30, -1e-300, -1e-8, 0, 1e-10, 0.3466,
                            0.5, 1, 2.5, 20, 21.9, 22.5, 300, 709.7, 710, 1e308};
  const Array h = Array::from_data<double>(xs, {static_cast<std::int64_t>(xs.size())});
  // lavapipe's f64 exp loses ~|x| * 3e-17 relative near the overflow bound.
  differential({h}, [](auto& x) { return exp(x[0]); }, 5e-14);
  differential({h}, [](auto& x) { return tanh(x[0]); }, 1e-14);
  differential({abs(h)}, [](auto& x) { return log(x[0]); }, 1e-14);
}

TEST_CASE("binary ops broadcast on Vulkan as on the CPU, for every dtype") {
  using BinaryFn = Array (*)(const Array&, const Array&);
  const std::pair<const char*, BinaryFn> arith[] = {
      {"add", add}, {"subtract", subtract}, {"multiply", multiply}, {"divide", divide},
      {"maximum", maximum}, {"minimum", minimum}, {"less", less}, {"equal", equal},
      {"greater_equal", greater_equal}, {"not_equal", not_equal}};
  const std::pair<Shape, Shape> pairs[] = {
      {{2, 3, 4}, {2, 3, 4}}, {{2, 3, 4}, {4}}, {{2, 1, 4}, {3, 1}}, {{}, {5, 7}},
      {{1000, 1}, {1, 3}},    {{257}, {1}},     {{1, 1}, {1}}};
  for (DType dt : {f32, f64, i32, u32}) {
    for (const auto& [sa, sb] : pairs) {
      for (auto [op_name, op] : arith) {
        CAPTURE(op_name);
        CAPTURE(dt);
        differential({host_random(sa, dt), host_random(sb, dt)},
                     [&](auto& x) { return op(x[0], x[1]); });
      }
    }
  }
  for (const auto& [sa, sb] : pairs) {
    differential({host_random(sa, f32), host_random(sb, f32, 0.1, 3)},
                 [](auto& x) { return power(abs(x[0]), x[1]); }, 1e-5);
    differential({host_random(sa, f64), host_random(sb, f64, -3, 3)},
                 [](auto& x) { return power(x[0], astype(astype(x[1], i32), f64)); }, 1e-13);
  }
}

TEST_CASE("bool, bitwise and shift ops on Vulkan equal the CPU") {
  const Shape s{3, 1, 5}, t{4, 5};
  differential({host_random(s, bool_), host_random(t, bool_)},
               [](auto& x) { return logical_and(x[0], x[1]); });
  differential({host_random(s, bool_), host_random(t, bool_)},
               [](auto& x) { return logical_or(x[0], !x[1]); });
  differential({host_random(s, bool_), host_random(t, bool_)},
               [](auto& x) { return maximum(x[0], x[1]); });
  for (DType dt : {i32, u32}) {
    differential({host_random(s, dt), host_random(t, dt)},
                 [](auto& x) { return bitwise_xor(bitwise_and(x[0], x[1]), bitwise_not(x[1])); });
    differential({host_random(s, dt), abs(host_random(t, i32))},
                 [&](auto& x) {
                   Array amount = astype(x[1], dt);
                   return shift_right_logical(shift_left(x[0], amount), amount);
                 });
  }
  differential({host_random(s, f32)}, [](auto& x) { return bitcast(x[0], u32); });
}

TEST_CASE("where and astype between every pair of dtypes on Vulkan equal the CPU") {
  const Shape s{4, 33};
  differential({host_random(s, bool_), host_random(s, f32), host_random({33}, f32)},
               [](auto& x) { return where(x[0], x[1], x[2]); });
  for (DType from : {f32, f64, i32, u32, bool_}) {
    for (DType to : {f32, f64, i32, u32, bool_}) {
      CAPTURE(from);
      CAPTURE(to);
      differential({host_random(s, from, -1e10, 1e10)},
                   [&](auto& x) { return astype(x[0], to); });
    }
  }
}

TEST_CASE("reductions over any axes on Vulkan equal the CPU") {
  const Shape s{6, 1, 35, 4};
  const std::vector<Axes> axes_list = {{0}, {2}, {3}, {0, 2}, {1, 3}, {0, 1, 2, 3}};
  for (DType dt : {f32, f64, i32, u32}) {
    for (const auto& axes : axes_list) {
      CAPTURE(dt);
      const Array h = host_random(s, dt);
      differential({h}, [&](auto& x) { return sum(x[0], axes); }, 1e-5);
      differential({h}, [&](auto& x) { return max(x[0], axes, true); });
      differential({h}, [&](auto& x) { return min(x[0], axes); });
    }
  }
  for (std::int64_t axis : {0, 2, 3}) {
    differential({host_random(s, f32)}, [&](auto& x) { return argmax(x[0], axis); });
    differential({host_random(s, i32)}, [&](auto& x) { return argmin(x[0], axis); });
  }
  // The workgroup tree path: long rows, few outputs.
  differential({host_random({3, 20000}, f32)}, [](auto& x) { return sum(x[0], {1}); }, 1e-5);
  differential({host_random({3, 20000}, f32)}, [](auto& x) { return max(x[0], {1}); });
  differential({host_random({5000}, i32)}, [](auto& x) { return sum(x[0]); });
  // NaN propagates through max and is the argmax.
  std::vector<float> v = {1, 2, NAN, 5};
  differential({Array::from_data<float>(v, {4})}, [](auto& x) { return max(x[0]); });
  differential({Array::from_data<float>(v, {4})}, [](auto& x) { return argmax(x[0]); });
  differential({host_random({4, 0}, f32)}, [](auto& x) { return sum(x[0], {1}); });
}

TEST_CASE("reductions in each of their workgroup tilings equal the CPU") {
  // (kernel_reduce.cpp's tiling; this device's parallel_invocations decides which
  // shape gets which, and every one of these reaches a tiled form on lavapipe
  // (4096) and on a GPU (131072).)
  // Column reductions: lanes along the outputs, a partial last workgroup (70
  // and 1001 outputs are no multiple of 8), f16 and NaN included.
  Array cols = host_random({3000, 70}, f32);
  differential({cols}, [](auto& x) { return sum(x[0], {0}); }, 1e-4);
  differential({cols}, [](auto& x) { return max(x[0], {0}); });
  differential({host_random({400, 1001}, f32)}, [](auto& x) { return sum(x[0], {0}); }, 1e-4);
  differential({host_random({70, 3, 111}, f32)}, [](auto& x) { return min(x[0], {0, 1}); });
  differential({astype(host_random({2000, 24}, f32), f16)},
               [](auto& x) { return astype(sum(x[0], {0}), f32); }, 1e-3);
  std::vector<float> nan_col(64 * 9, 1.0f);
  nan_col[37 * 9 + 4] = NAN;
  differential({Array::from_data<float>(nan_col, {64, 9})}, [](auto& x) { return max(x[0], {0}); });
  // Row reductions: teams of slices per output, lanes along the elements.
  differential({cols}, [](auto& x) { return sum(x[0], {1}); }, 1e-4);
  differential({host_random({300, 513}, f32)}, [](auto& x) { return max(x[0], {1}); });
  differential({host_random({300, 513}, i32)}, [](auto& x) { return sum(x[0], {1}); });
  differential({host_random({9, 5, 130}, f32)}, [](auto& x) { return sum(x[0], {0, 2}); }, 1e-4);
  // A fused prologue under each tiling (the reduced array of an elementwise chain).
  auto sq = filter_jit([](const Array& a) { return std::tuple{sum(a * a + a, {0}), sum(exp(a), {1})}; });
  const auto [g0, g1] = sq(to_device(cols, kGpu));
  check_same(g0, sum(cols * cols + cols, {0}), 1e-4);
  check_same(g1, sum(exp(cols), {1}), 1e-4);
}
TEST_CASE("matmul on Vulkan equals the CPU: tiles, edges, batches, broadcasting") {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{1, 1}, {1, 1}},       {{3, 5}, {5, 2}},         {{64, 64}, {64, 64}},
      {{65, 17}, {17, 130}},  {{200, 33}, {33, 70}},    {{4, 7, 9}, {4, 9, 3}},
      {{2, 1, 5, 6}, {3, 6, 4}}, {{7}, {7, 3}},         {{5, 7}, {7}},
      {{3, 0}, {0, 4}}};
  for (DType dt : {f32, f64}) {
    for (const auto& [sa, sb] : cases) {
      CAPTURE(dt);
      differential({host_random(sa, dt), host_random(sb, dt)},
                   [](auto& x) { return matmul(x[0], x[1]); }, 1e-5);
    }
  }
}

// CPU-type devices (lavapipe) pick register tiles by size and alignment: 4 x 8
// or, from 256^3 multiply-adds on, 8 x 16 outputs per invocation; A read 4 along
// k when K % 4 == 0, else one by one; B read 8 along n (N % 8 == 0, u64 loads),
// 4 (N % 4 == 0) or 1; C stored 4 at a time when N % 4 == 0. These shapes take
// each variant across ragged tile edges, batches and broadcasting, both sizes.
// (GPUs run them through the shared-memory kernel, equally checked.)
TEST_CASE("matmul on Vulkan equals the CPU: register-tile variants and their edges") {
  struct Case {
    Shape a, b;
    const char* what;
  };
  const std::vector<Case> cases = {
      {{256, 256}, {256, 256}, "8x16 tiles, every load and store vectorised"},
      {{300, 264}, {264, 216}, "8x16, M and N not multiples of the 16 x 128 block"},
      {{258, 257}, {257, 264}, "8x16, K % 4 != 0: A element by element, K tail"},
      {{264, 252}, {252, 260}, "8x16, N % 8 == 4: B as 4-vectors"},
      {{260, 256}, {256, 259}, "N % 4 != 0: scalar B, scalar stores"},
      {{4, 128, 256}, {256, 136}, "batched 8x16 with B broadcast over the batch"},
      {{2, 1, 40, 24}, {3, 24, 40}, "4x8 tiles, both operands broadcast over batches"},
      {{33, 12}, {12, 20}, "4x8 tiles, 4-vector A, 4-vector B, ragged edges"},
      {{9, 1}, {1, 16}, "K == 1"},
      {{300, 1}, {1, 264}, "K == 1, M and N ragged"},
      {{1, 64}, {64, 8}, "one row"},
      {{64, 64}, {64, 1}, "one column"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.what);
    // f64 takes the scalar-load path of the same tiles.
    for (DType dt : {f32, f64}) {
      CAPTURE(dt);
      differential({host_random(c.a, dt), host_random(c.b, dt)},
                   [](auto& x) { return matmul(x[0], x[1]); }, dt == f32 ? 1e-4 : 1e-12);
    }
  }
  // Operands transposed before the product (materialised transposes on Vulkan).
  differential({host_random({264, 256}, f32), host_random({264, 256}, f32)},
               [](auto& x) { return matmul(transpose(x[0]), x[1]); }, 1e-4);
  differential({host_random({256, 264}, f32), host_random({256, 264}, f32)},
               [](auto& x) { return matmul(x[0], transpose(x[1])); }, 1e-4);
}

TEST_CASE("layout ops on Vulkan equal the CPU: transpose, broadcast, slice, concat") {
  const Array h = host_random({3, 4, 5}, f32);
  differential({h}, [](auto& x) { return transpose(x[0], {2, 0, 1}); });
  differential({h}, [](auto& x) { return transpose(x[0]); });
  differential({h}, [](auto& x) { return reshape(x[0], {5, 12}); });
  differential({h}, [](auto& x) { return broadcast_to(x[0], {2, 3, 4, 5}); });
  differential({host_random({4, 1}, i32)}, [](auto& x) { return broadcast_to(x[0], {4, 9}); });
  differential({h}, [](auto& x) { return slice(x[0], {1, 0, 1}, {3, 4, 5}, {1, 2, 3}); });
  differential({h}, [](auto& x) { return slice_axis(x[0], 2, 1, 4, 1); });
  differential({h, host_random({3, 2, 5}, f32)},
               [](auto& x) { return concatenate({x[0], x[1], x[0]}, 1); });
  differential({host_random({2, 3}, bool_), host_random({1, 3}, bool_)},
               [](auto& x) { return concatenate({x[0], x[1]}, 0); });
}

TEST_CASE("take, take_along_axis and one_hot on Vulkan equal the CPU") {
  const Array h = host_random({4, 6, 3}, f32);
  const Array idx = Array::from_data<std::int32_t>(std::vector<std::int32_t>{0, 5, -1, 2, 2},
                                                    {5});
  differential({h, idx}, [](auto& x) { return take(x[0], x[1], 1); });
  const Array idx2 = Array::from_data<std::int32_t>(std::vector<std::int32_t>{3, 0, -4, 1},
                                                     {2, 2});
  differential({h, idx2}, [](auto& x) { return take(x[0], x[1], 0); });
  const Array along = Array::from_data<std::int32_t>(
      std::vector<std::int32_t>{0, 2, 1, -1, 0, 1, 2, 0}, {4, 2, 1});
  differential({h, along}, [](auto& x) { return take_along_axis(x[0], x[1], 1); });
  differential({Array::from_data<std::int32_t>(std::vector<std::int32_t>{0, 3, -1, 7, 2}, {5})},
               [](auto& x) { return one_hot(x[0], 4); });
}

TEST_CASE("argsort past the shared-memory chunk equals the CPU's stable order") {
  // kernel_sort.cpp: steps within a chunk run in shared memory, wider ones one
  // dispatch each. Lengths around the chunk (1024 on lavapipe, 2048 on GPUs)
  // and padding; few distinct values, so ties (stability) are everywhere.
  for (std::int64_t n : {1, 2, 3, 1000, 1025, 2049, 5000, 70000}) {
    CAPTURE(n);
    const Array h = round(host_random({n}, f32) * 4.0f) / 4.0f;
    differential({h}, [](auto& x) { return argsort(x[0]); });
    differential({h}, [](auto& x) { return argsort(x[0], -1, true); });
  }
  // Several lines, along an outer axis, with NaN and signed zeros.
  std::vector<float> v(3 * 3000 * 2);
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> pick(0, 9);
  for (auto& x : v) {
    const int r = pick(rng);
    x = r == 0 ? NAN : r == 1 ? -0.0f : r == 2 ? 0.0f : static_cast<float>(r - 5);
  }
  const Array lines = Array::from_data<float>(v, {3, 3000, 2});
  differential({lines}, [](auto& x) { return argsort(x[0], 1); });
  differential({lines}, [](auto& x) { return sort(x[0], 1, true); });
  differential({astype(lines, i32)}, [](auto& x) { return argsort(x[0], 1); });
}

TEST_CASE("scatters split into row blocks equal the CPU bit for bit") {
  // kernel_columns.cpp: one invocation per (column, block of result rows), each
  // applying its block's updates in index order, as the CPU's loop does; so
  // repeated indices sum (or overwrite) in the same order: equal bits (rtol 0).
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::int32_t> pick(-1000, 999);
  std::vector<std::int32_t> ids(3000);
  for (auto& i : ids) i = pick(rng) / 4;  // [-250, 250): many repeats, negatives wrap
  const Array idx = Array::from_data<std::int32_t>(ids, {3000});
  const Array table = host_random({250, 8}, f32);
  const Array upd = host_random({3000, 8}, f32);
  differential({table, idx, upd}, [](auto& x) { return scatter_add(x[0], x[1], x[2], 0); }, 0);
  differential({table, idx, upd}, [](auto& x) { return scatter(x[0], x[1], x[2], 0); }, 0);
  // The gradient of take (an embedding's backward pass), inside a compiled program.
  const Array w = host_random({3000, 8}, f32);
  auto grad_take = [&](const Array& t, const Array& i, const Array& ww) {
    return grad([&](const Array& tt) { return sum(take(tt, i, 0) * ww); })(t);
  };
  auto jitted = filter_jit(grad_take);
  check_same(jitted(to_device(table, kGpu), to_device(idx, kGpu), to_device(w, kGpu)),
             grad_take(table, idx, w), 0);
  // Per-element indices along an inner axis, and i32 updates.
  std::vector<std::int32_t> along_ids(6 * 40 * 5);
  for (auto& i : along_ids) i = pick(rng) % 7;  // (-7, 7): negatives wrap
  const Array along = Array::from_data<std::int32_t>(along_ids, {6, 40, 5});
  const Array base = host_random({6, 7, 5}, i32);
  differential({base, along, host_random({6, 40, 5}, i32)},
               [](auto& x) { return scatter_add_along_axis(x[0], x[1], x[2], 1); }, 0);
}

TEST_CASE("an index out of range on Vulkan is the CPU's IndexError") {
  const Array a = to_device(host_random({4}, f32), kGpu);
  const Array idx = to_device(Array::from_data<std::int32_t>(std::vector<std::int32_t>{1, 4}, {2}),
                              kGpu);
  CHECK_THROWS_WITH_AS(take(a, idx, 0),
                       "[take] index 4 is out of range for axis 0 of size 4", IndexError);
}

TEST_CASE("creation on Vulkan: full and arange equal the CPU") {
  for (DType dt : {f32, f64, i32, u32, bool_}) {
    check_same(full({3, 70}, 1.0, dt, kGpu), full({3, 70}, 1.0, dt, Device::cpu()));
  }
  set_default_device(kGpu);
  const Array g = arange(2.5, 11.0, 0.75, f32);
  set_default_device(Device::cpu());
  check_same(g, arange(2.5, 11.0, 0.75, f32));
}

// The limit is the device's maxComputeWorkGroupCount[0] (65535 on lavapipe);
// the suites lower it with KILN_VK_MAX_GROUP_COUNT so that the 2-D grids come
// with arrays of a few MiB, not 64 MiB (the code and the dispatch are the same).
TEST_CASE("sizes above 65535 * 256 elements use a 2-D dispatch grid") {
  const std::int64_t per_row =
      std::int64_t{vk::Context::get(0).caps().max_group_count[0]} * 256;
  const std::int64_t n = per_row - per_row % 3 + 3;  // past it, a multiple of 3
  const Array h = host_random({n}, f32);
  differential({h}, [](auto& x) { return x[0] * 2.0f + 1.0f; });
  differential({h}, [n](auto& x) { return sum(reshape(x[0], {n / 3, 3}), {1}); }, 1e-5);
  // transpose of a big matrix: the strided map path with a 2-D grid
  const Array m = host_random({per_row / 4097 + 2, 4097}, f32);
  differential({m}, [](auto& x) { return transpose(x[0]); });
  // Counts that take the vector paths: 8 elements per item (four u64 loads on
  // CPU-type devices, 4-vectors elsewhere) and 4, with a broadcast scalar and
  // integers; on CPU-type devices each workgroup walks one contiguous chunk.
  for (std::int64_t extra : {8, 4}) {
    CAPTURE(extra);
    const std::int64_t big = per_row + extra;
    const Array x = host_random({big}, f32), y = host_random({big}, f32);
    differential({x, y, host_random({}, f32)}, [](auto& v) { return (v[0] - v[1]) * v[2]; });
    differential({host_random({big}, i32), host_random({big}, i32)},
                 [](auto& v) { return maximum(v[0], v[1]) + v[0] * v[1]; });
  }
}

// llvmpipe ends any kernel loop after 65535 iterations per invocation
// (Quirks::max_loop_iterations): reductions whose invocations walk more elements
// than that unroll, map kernels launch more workgroups, and a matmul whose K loop
// would pass it is refused. Elsewhere (no limit) the same calls just work.
TEST_CASE("kernel loops stay under the driver's iteration limit") {
  const auto& q = vk::Context::get(0).quirks();
  const std::int64_t n = 70001;  // one invocation per output walks all of them
  std::vector<float> v(static_cast<std::size_t>(n), 0.0f);
  v.back() = 5.0f;
  v[3] = -5.0f;
  const Array h = Array::from_data<float>(v, {n});
  const Array g = to_device(h, kGpu);
  CHECK(argmax(g).item<std::int32_t>() == n - 1);
  CHECK(argmin(g).item<std::int32_t>() == 3);
  // A full sum over 2^25 + 3 elements: 131073 per invocation of one workgroup.
  const std::int64_t big = (1 << 25) + 3;
  const Array ones = full({big}, 1.0, i32, kGpu);
  CHECK(sum(ones).item<std::int32_t>() == big);
  const Array rows = host_random({3, 200003}, f32);
  check_same(sum(to_device(rows, kGpu), {1}), sum(rows, {1}), 1e-4);
  const Array a = full({1, 300000}, 1.0f, f32, kGpu);
  const Array b = full({300000, 1}, 1.0f, f32, kGpu);
  if (q.max_loop_iterations > 0) {
    CHECK_THROWS_WITH_AS(matmul(a, b), doctest::Contains("stops loops after 65535"),
                         DeviceError);
  } else {
    CHECK(matmul(a, b).item<float>() == 300000.0f);
  }
}

TEST_CASE("elementwise counts around the 4- and 8-element items and the chunks") {
  // Contiguous chunks per workgroup on CPU-type devices: counts below, at and
  // past one item per workgroup, and not multiples of 8 or 4.
  for (std::int64_t n : {1, 3, 4, 8, 12, 64, 500, 512, 513, 4096, 4100, 65536, 65544, 1000003}) {
    CAPTURE(n);
    const Array x = host_random({n}, f32), y = host_random({n}, f32);
    differential({x, y}, [](auto& v) { return v[0] * v[1] + v[0]; });
    differential({x}, [](auto& v) { return exp(v[0]) - 1.0f; }, 1e-6);
  }
  // Integer inputs (texel views of SINT / UINT format on CPU-type devices).
  for (std::int64_t n : {4096, 4100, 65544}) {
    CAPTURE(n);
    differential({host_random({n}, i32), host_random({n}, i32)},
                 [](auto& v) { return v[0] * v[1] - v[0]; });
    differential({host_random({n}, u32), host_random({n}, u32)},
                 [](auto& v) { return bitwise_xor(v[0], v[1]) + v[1]; });
  }
}

TEST_CASE("f16 arrays live on Vulkan and compute in f32") {
  const Array h = host_random({5, 9}, f32);
  const Array g = astype(to_device(h, kGpu), f16);
  CHECK(g.dtype() == f16);
  const Array back = astype(exp(g) + g, f32);
  // f16 keeps ~3 decimal digits
  check_same(back, exp(h) + h, 2e-3);
}

TEST_CASE("a bad device index names the devices there are") {
  CHECK_THROWS_WITH_AS(zeros({2}, f32, Device::vulkan(42)),
                       doctest::Contains("there is no device vulkan:42"), DeviceError);
}

TEST_CASE("running out of device memory is an OutOfMemoryError that names the heap") {
  auto& ctx = vk::Context::get(0);
  const auto heap = ctx.allocator().heap_size();
  const std::int64_t per = std::min<std::int64_t>(
      static_cast<std::int64_t>(ctx.caps().max_storage_buffer_range / 4), 1 << 25);
  std::vector<Array> held;
  bool thrown = false;
  try {
    for (std::uint64_t used = 0; used <= heap + 4 * static_cast<std::uint64_t>(per); used += 4 * per) {
      held.push_back(zeros({per}, f32, kGpu));
    }
  } catch (const OutOfMemoryError& e) {
    thrown = true;
    CHECK(std::string(e.what()).find("out of device memory") != std::string::npos);
    CHECK(std::string(e.what()).find("heap of vulkan:0") != std::string::npos);
  }
  CHECK(thrown);
  held.clear();
  // Memory comes back: a new array of the same size fits again.
  CHECK(sum(zeros({per}, f32, kGpu)).item<float>() == 0.0f);
}

// On devices whose largest allocation is below maxStorageBufferRange (NVIDIA:
// 4094 MiB against 4 GiB - 1) no array outgrows one descriptor, so there is
// nothing for the tests of such arrays to check.
bool past_one_allocation(const vk::Context& ctx, std::int64_t bytes) {
  const auto limit = ctx.caps().max_allocation_size;
  if (limit == 0 || static_cast<std::uint64_t>(bytes) <= limit) return false;
  MESSAGE("skipped: ", bytes, " bytes are past this device's largest allocation (", limit,
          "), so no array outgrows maxStorageBufferRange");
  return true;
}

TEST_CASE("without bufferDeviceAddress an array past maxStorageBufferRange is refused") {
  // Run with KILN_VK_DISABLE_BUFFER_ADDRESS=1 (meson test vulkan-no-addresses).
  auto& ctx = vk::Context::get(0);
  if (ctx.caps().buffer_device_address) return;
  const auto range = static_cast<std::int64_t>(ctx.caps().max_storage_buffer_range);
  if (past_one_allocation(ctx, range + 4)) return;
  CHECK_THROWS_WITH_AS(zeros({range / 4 + 1}, f32, kGpu),
                       doctest::Contains("maxStorageBufferRange"), OutOfMemoryError);
  CHECK_THROWS_WITH_AS(zeros({range / 4 + 1}, f32, kGpu),
                       doctest::Contains("no bufferDeviceAddress"), OutOfMemoryError);
  CHECK(sum(zeros({range / 4}, f32, kGpu)).item<float>() == 0.0f);  // the largest that fits
}

// Past maxStorageBufferRange (128 MiB on lavapipe) kernels reach an array through
// its device address: every kernel family, with the array as input and output,
// and reads past the first range's worth of elements (slices at offsets beyond
// it, gathers near its end).
TEST_CASE("arrays larger than maxStorageBufferRange work through device addresses") {
  auto& ctx = vk::Context::get(0);
  if (!ctx.caps().buffer_device_address) return;  // vulkan-no-addresses covers that
  const auto range = static_cast<std::int64_t>(ctx.caps().max_storage_buffer_range);
  const std::int64_t cols = 256;
  const std::int64_t rows = range / 4 / cols + 19;  // f32 [rows, cols] > range
  if (past_one_allocation(ctx, rows * cols * 4)) return;
  REQUIRE(rows * cols * 4 > range);
  const Array hx = host_random({rows, cols}, f32);
  const Array x = to_device(hx, kGpu);
  // map kernels (4/8-wide), a fused chain, broadcasting a row.
  const Array hb = host_random({cols}, f32);
  check_same(x * 2.0f + 1.0f, hx * 2.0f + 1.0f);
  check_same(relu(x - to_device(hb, kGpu)), relu(hx - hb));
  // reductions: over everything (a per-workgroup pass over > range bytes), per row.
  check_same(sum(x, {1}), sum(hx, {1}), 1e-5);
  check_same(max(x, {0}), max(hx, {0}));
  const double total = as_doubles(sum(x))[0];
  CHECK(total == doctest::Approx(as_doubles(sum(hx))[0]).epsilon(1e-3));
  // slices starting past the first range, concatenate, transpose.
  const std::int64_t last = rows - 7;
  check_same(slice(x, {last, 3}, {rows, cols}), slice(hx, {last, 3}, {rows, cols}));
  check_same(concatenate({x, slice(x, {0, 0}, {5, cols})}, 0),
             concatenate({hx, slice(hx, {0, 0}, {5, cols})}, 0));
  check_same(transpose(slice(x, {last - 100, 0}, {rows, cols})),
             transpose(slice(hx, {last - 100, 0}, {rows, cols})));
  // gathers from the large array near its end.
  const std::vector<std::int32_t> picks = {static_cast<std::int32_t>(rows - 1), 0,
                                           static_cast<std::int32_t>(rows / 2), -1};
  const Array hidx = Array::from_data<std::int32_t>(picks, {4});
  check_same(take(x, to_device(hidx, kGpu), 0), take(hx, hidx, 0));
  // matmul with the large array as A, and as the (addressed) output of another.
  const Array hw = host_random({cols, 8}, f32);
  check_same(matmul(x, to_device(hw, kGpu)), matmul(hx, hw), 1e-4);
  const Array hv = host_random({rows, 2}, f32);
  const Array hu = host_random({2, cols}, f32);
  check_same(matmul(to_device(hv, kGpu), to_device(hu, kGpu)), matmul(hv, hu), 1e-5);
  // A jitted step over it: one fused program.
  const auto step = filter_jit([](const Array& a, const Array& b) {
    return sum((a - b) * (a - b), {1});
  });
  check_same(step(x, to_device(hb, kGpu)), sum((hx - hb) * (hx - hb), {1}), 1e-5);
}

TEST_CASE("equal kernels share one pipeline whatever op produced them") {
  auto& cache = vk::Context::get(0).pipelines();
  const Array a = to_device(host_random({17}, bool_), kGpu);
  const Array b = to_device(host_random({17}, bool_), kGpu);
  const auto before = cache.stats();
  const Array x = logical_or(a, b);  // both lower to OpLogicalOr on bool
  const Array y = maximum(a, b);
  const Array z = bitwise_or(a, b);
  const auto after = cache.stats();
  CHECK(after.keys - before.keys == 3);
  CHECK(after.pipelines - before.pipelines <= 1);
  CHECK(after.text_hits - before.text_hits >= 2);
  CHECK(as_doubles(x) == as_doubles(y));
  CHECK(as_doubles(x) == as_doubles(z));
  // A repeated op is a key hit: nothing new is built.
  const auto again = cache.stats();
  (void)logical_or(b, a);
  CHECK(cache.stats().keys == again.keys);
}

TEST_CASE("a kernel's SPIR-V prints as the assembly it was compiled from") {
  auto& cache = vk::Context::get(0).pipelines();
  const Array a = to_device(host_random({3}, f32), kGpu);
  (void)(a * a);
  const vk::Pipeline* p = cache.find("map|multiply|f32|f32@1;f32@1;");
  REQUIRE_MESSAGE(p != nullptr, "the multiply kernel should already be cached");
  CHECK(p->text.find("OpEntryPoint GLCompute %main \"main\"") != std::string::npos);
  CHECK(p->text.find("OpFMul %f32") != std::string::npos);
  // NaN, Inf and signed zeros are kept wherever the device can be told to.
  const bool keeps_f32 = (vk::Context::get(0).caps().preserve_float_widths & 2u) != 0;
  CHECK((p->text.find("OpExecutionMode %main SignedZeroInfNanPreserve 32") != std::string::npos) ==
        keeps_f32);
}

TEST_CASE("kernels declare SignedZeroInfNanPreserve for the float widths they use, where allowed") {
  const std::string head =
      "OpCapability Shader\nOpCapability Float16\n%glsl = OpExtInstImport \"GLSL.std.450\"\n"
      "OpMemoryModel Logical GLSL450\nOpEntryPoint GLCompute %main \"main\"\n"
      "OpExecutionMode %main LocalSize 64 1 1\n";
  const std::string f32_f16 = head + "%f32 = OpTypeFloat 32\n%f16 = OpTypeFloat 16\n";
  const std::string both = vk::spv::preserve_special_floats(f32_f16, 7);
  CHECK(both.rfind("OpCapability SignedZeroInfNanPreserve\n", 0) == 0);
  CHECK(both.find("OpCapability Float16\nOpExtension \"SPV_KHR_float_controls\"\n%glsl") !=
        std::string::npos);
  CHECK(both.find("LocalSize 64 1 1\nOpExecutionMode %main SignedZeroInfNanPreserve 16\n"
                  "OpExecutionMode %main SignedZeroInfNanPreserve 32\n") != std::string::npos);
  CHECK(both.find("SignedZeroInfNanPreserve 64") == std::string::npos);  // no f64 in it
  const std::string only32 = vk::spv::preserve_special_floats(f32_f16, 2);
  CHECK(only32.find("SignedZeroInfNanPreserve 16") == std::string::npos);
  CHECK(only32.find("SignedZeroInfNanPreserve 32") != std::string::npos);
  CHECK(vk::spv::preserve_special_floats(f32_f16, 0) == f32_f16);
  CHECK(vk::spv::preserve_special_floats(head + "%u32 = OpTypeInt 32 0\n", 7) ==
        head + "%u32 = OpTypeInt 32 0\n");
  // Every kernel this device compiles is valid with it (the suites run under
  // the validation layer); a special-value check through several kernels:
  const Array x = to_device(Array::from_data<float>(std::vector<float>{NAN, -0.0f, INFINITY}, {3}),
                            kGpu);
  const std::vector<float> e = erf(x).to_vector<float>();
  CHECK(std::isnan(e[0]));
  CHECK((e[1] == 0.0f && std::signbit(e[1])));
  CHECK(e[2] == 1.0f);
  const std::vector<float> t = atan2(full({3}, 1.0f, f32, kGpu), x).to_vector<float>();
  CHECK(std::isnan(t[0]));
  CHECK((t[2] == 0.0f && !std::signbit(t[2])));
}

namespace {
// The application side of an embedding: its own instance, device and queue. Under
// KILN_VALIDATION=1 its instance gets the validation layer too (kiln's messenger
// sees only kiln's own instance); messages are counted in g_app_messages.
int g_app_messages = 0;
VKAPI_ATTR VkBool32 VKAPI_CALL count_app_message(VkDebugUtilsMessageSeverityFlagBitsEXT,
                                                 VkDebugUtilsMessageTypeFlagsEXT,
                                                 const VkDebugUtilsMessengerCallbackDataEXT* data,
                                                 void*) {
  std::fprintf(stderr, "application's validation layer: %s\n", data->pMessage);
  ++g_app_messages;
  return VK_FALSE;
}

struct AppDevice {
  VkInstance instance = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger = VK_NULL_HANDLE;
  vulkan::ExternalDevice ext;  // with 8-bit storage enabled
};

AppDevice make_app_device() {
  AppDevice app;
  VkApplicationInfo ai{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  ai.apiVersion = VK_API_VERSION_1_2;
  VkInstanceCreateInfo ii{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  ii.pApplicationInfo = &ai;
  const char* layer = "VK_LAYER_KHRONOS_validation";
  const char* ext = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
  VkDebugUtilsMessengerCreateInfoEXT mi{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
  mi.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                       VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
  mi.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT;
  mi.pfnUserCallback = count_app_message;
  if (vk::validation_enabled()) {
    ii.enabledLayerCount = 1;
    ii.ppEnabledLayerNames = &layer;
    ii.enabledExtensionCount = 1;
    ii.ppEnabledExtensionNames = &ext;
  }
  REQUIRE(vkCreateInstance(&ii, nullptr, &app.instance) == VK_SUCCESS);
  if (vk::validation_enabled()) {
    auto create = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
        vkGetInstanceProcAddr(app.instance, "vkCreateDebugUtilsMessengerEXT"));
    REQUIRE(bool(create));
    REQUIRE(create(app.instance, &mi, nullptr, &app.messenger) == VK_SUCCESS);
  }
  std::uint32_t n = 1;
  VkPhysicalDevice phys;
  REQUIRE(vkEnumeratePhysicalDevices(app.instance, &n, &phys) != VK_ERROR_INITIALIZATION_FAILED);
  REQUIRE(n >= 1);
  std::uint32_t nf = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(phys, &nf, nullptr);
  std::vector<VkQueueFamilyProperties> fams(nf);
  vkGetPhysicalDeviceQueueFamilyProperties(phys, &nf, fams.data());
  std::uint32_t family = 0;
  while (!(fams[family].queueFlags & VK_QUEUE_COMPUTE_BIT)) ++family;
  float prio = 1;
  VkDeviceQueueCreateInfo qi{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  qi.queueFamilyIndex = family;
  qi.queueCount = 1;
  qi.pQueuePriorities = &prio;
  VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  f12.storageBuffer8BitAccess = VK_TRUE;
  VkDeviceCreateInfo di{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  di.pNext = &f12;
  di.queueCreateInfoCount = 1;
  di.pQueueCreateInfos = &qi;
  VkDevice device;
  REQUIRE(vkCreateDevice(phys, &di, nullptr, &device) == VK_SUCCESS);
  app.ext.instance = app.instance;
  app.ext.physical_device = phys;
  app.ext.device = device;
  app.ext.queue_family = family;
  app.ext.storage_buffer_8bit = true;
  return app;
}

void destroy_app_device(AppDevice& app) {
  vkDestroyDevice(app.ext.device, nullptr);
  if (app.messenger != VK_NULL_HANDLE) {
    auto destroy = reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
        vkGetInstanceProcAddr(app.instance, "vkDestroyDebugUtilsMessengerEXT"));
    destroy(app.instance, app.messenger, nullptr);
  }
  vkDestroyInstance(app.instance, nullptr);
}
}  // namespace

TEST_CASE("an application's own VkDevice runs kiln's ops, and kiln owns none of it") {
  AppDevice app = make_app_device();
  const Device mine = vulkan::use_external_device(app.ext);
  CHECK(mine.kind == Device::Kind::kVulkan);
  CHECK(mine.index >= 1);
  CHECK(vk::Context::get(mine.index).handle() == app.ext.device);

  {
    const Array h = host_random({4, 70}, f32);
    const Array g = to_device(h, mine);
    CHECK(g.device() == mine);
    check_close_to(sum(g * g, {1}), sum(h * h, {1}));
    CHECK(as_doubles(g > 0.0f) == as_doubles(h > 0.0f));
    // f64 was not enabled by the application: kiln says so instead of failing.
    CHECK_THROWS_WITH_AS(to_device(astype(h, f64), mine),
                         doctest::Contains("lacks shaderFloat64"), DTypeError);
  }
  vulkan::release_external_device(mine);
  destroy_app_device(app);
  CHECK(g_app_messages == 0);
}

TEST_CASE("an application's device is released once kiln's arrays on it are gone, "
          "and then destroyed without a validation message") {
  AppDevice app = make_app_device();
  const Device mine = vulkan::use_external_device(app.ext);
  {
    auto f = filter_jit([](const Array& a) { return sum(a * a + a, {1}); });
    const Array h = host_random({4, 70}, f32);
    const Array a = to_device(h, mine);
    const Array s = f(a);
    check_close_to(s, sum(h * h + h, {1}));
    // A compiled gather's device-side index check leaves the stream a slot
    // buffer of its own: not an array of the application's.
    auto g = filter_jit([](const Array& x, const Array& i) { return take(x, i, 0); });
    const Array hi = Array::from_data<std::int32_t>(std::vector<std::int32_t>{3, 0}, {2});
    check_close_to(g(a, to_device(hi, mine)), take(h, hi, 0));
    CHECK_THROWS_WITH_AS(vulkan::release_external_device(mine),
                         doctest::Contains(("2 arrays still live on " + mine.to_string()).c_str()),
                         DeviceError);
    check_close_to(f(a), s);  // a refused release leaves the device working
  }
  vulkan::release_external_device(mine);
  vulkan::release_external_device(mine);  // once released, again does nothing
  CHECK_THROWS_WITH_AS(to_device(host_random({3}, f32), mine),
                       doctest::Contains("was released by the application"), DeviceError);
  CHECK_THROWS_WITH_AS(synchronize(mine), doctest::Contains("was released"), DeviceError);
  CHECK_THROWS_WITH_AS(vulkan::release_external_device(kGpu),
                       doctest::Contains("is not a device the application gave kiln"),
                       DeviceError);
  // With objects of kiln's left on it, the layer reports VUID-vkDestroyDevice-device-00378.
  destroy_app_device(app);
  CHECK(g_app_messages == 0);
}

// Run by the test below in a child process (KILN_TEST_CHILD=1): compiles a few
// kernels and prints how many came from the disk cache.
TEST_CASE("child: compile kernels and report disk cache hits") {
  if (std::getenv("KILN_TEST_CHILD") == nullptr) return;
  const Array a = to_device(host_random({5, 7}, f32), kGpu);
  (void)sum(exp(a) * 3.0f + a, {1}).to_vector<float>();
  (void)matmul(a, transpose(a)).to_vector<float>();
  const auto s = vk::Context::get(0).pipelines().stats();
  std::printf("disk_hits=%zu pipelines=%zu\n", s.disk_hits, s.pipelines);
}

namespace {
struct ChildRun {
  std::size_t disk_hits = 0, pipelines = 0;
  std::string output;
};
ChildRun run_child(const std::string& cache_dir) {
  const std::string cmd = "KILN_TEST_CHILD=1 KILN_CACHE_DIR=" + cache_dir +
                          " /proc/" + std::to_string(getpid()) +
                          "/exe -tc='child: compile kernels and report disk cache hits' 2>&1";
  ChildRun r;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  while (std::fgets(buf, sizeof(buf), p)) r.output += buf;
  CHECK(pclose(p) == 0);
  const auto at = r.output.find("disk_hits=");
  REQUIRE(at != std::string::npos);
  std::sscanf(r.output.c_str() + at, "disk_hits=%zu pipelines=%zu", &r.disk_hits,
              &r.pipelines);
  return r;
}
}  // namespace

TEST_CASE(
    "kernels come back from the disk cache after a restart; a corrupt file or invalid SPIR-V "
    "is rebuilt") {
  char tmpl[] = "/tmp/kiln-disk-cache-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  const ChildRun cold = run_child(dir);
  CAPTURE(cold.output);
  CHECK(cold.pipelines >= 4);
  CHECK(cold.disk_hits == 0);
  const ChildRun warm = run_child(dir);
  CAPTURE(warm.output);
  CHECK(warm.disk_hits == warm.pipelines);
  CHECK(warm.pipelines == cold.pipelines);
  // Damage one stored kernel: it is a miss with one warning, and rewritten.
  std::string victim;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.path().filename().string().rfind("spirv-", 0) == 0) victim = e.path();
  }
  REQUIRE(!victim.empty());
  {
    std::FILE* f = std::fopen(victim.c_str(), "r+b");
    REQUIRE(f != nullptr);
    std::fseek(f, 120, SEEK_SET);
    std::fputc(0x5a, f);
    std::fclose(f);
  }
  const ChildRun damaged = run_child(dir);
  CAPTURE(damaged.output);
  CHECK(damaged.disk_hits == damaged.pipelines - 1);
  CHECK(damaged.output.find("ignoring " + victim) != std::string::npos);
  const ChildRun repaired = run_child(dir);
  CHECK(repaired.disk_hits == repaired.pipelines);

  // An entry whose checksum is valid over SPIR-V that is not (a header, then
  // garbage words), as a buggy writer would leave it: before, the driver got it
  // and every op using the kernel failed in every later run. Now it fails
  // validation, is rebuilt with a warning, and the next run hits again.
  {
    std::ifstream in(victim, std::ios::binary);
    const std::vector<std::uint8_t> file{std::istreambuf_iterator<char>(in), {}};
    REQUIRE(file.size() > vk::kDiskCacheHeaderSize + 4);
    vk::CacheProvenance prov;
    std::memcpy(&prov.vendor_id, file.data() + 12, 4);
    std::memcpy(&prov.device_id, file.data() + 16, 4);
    std::memcpy(&prov.driver_version, file.data() + 20, 4);
    std::memcpy(prov.pipeline_cache_uuid.data(), file.data() + 24, 16);
    std::uint64_t key = 0;
    std::memcpy(&key, file.data() + 40, 8);
    std::vector<std::uint8_t> payload(file.begin() + vk::kDiskCacheHeaderSize, file.end());
    std::uint32_t text_bytes = 0;
    std::memcpy(&text_bytes, payload.data(), 4);
    const std::size_t words_at = 4 + text_bytes;
    REQUIRE(payload.size() > words_at + 5 * 4);
    for (std::size_t i = words_at + 5 * 4; i < payload.size(); ++i) payload[i] = 0xab;
    REQUIRE(vk::verify_entry(vk::encode_entry(prov, "spirv", key, payload), prov, "spirv", key)
                .empty());
    const auto bad = vk::encode_entry(prov, "spirv", key, payload);
    std::ofstream(victim, std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(bad.data()), static_cast<std::streamsize>(bad.size()));
  }
  const ChildRun invalid = run_child(dir);
  CAPTURE(invalid.output);
  CHECK(invalid.disk_hits == invalid.pipelines - 1);
  CHECK(invalid.output.find(victim + " holds SPIR-V that fails validation; rebuilding it") !=
        std::string::npos);
  const ChildRun rebuilt = run_child(dir);
  CHECK(rebuilt.disk_hits == rebuilt.pipelines);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a failing Vulkan call is a kiln error naming the call, file and line") {
  CHECK_THROWS_WITH_AS(
      vk::check(VK_ERROR_DEVICE_LOST, "vkQueueSubmit(queue, 1, &si, fence)", "/x/stream.cpp", 42),
      "[vulkan] vkQueueSubmit(queue, 1, &si, fence) failed with VK_ERROR_DEVICE_LOST "
      "(stream.cpp:42): the device was lost (driver reset or a kernel fault); arrays on "
      "it are gone",
      DeviceError);
  CHECK_THROWS_WITH_AS(vk::check(VK_ERROR_OUT_OF_DEVICE_MEMORY, "vkAllocateMemory(...)",
                                 "memory.cpp", 7),
                       "[vulkan] vkAllocateMemory(...) failed with "
                       "VK_ERROR_OUT_OF_DEVICE_MEMORY (memory.cpp:7)",
                       OutOfMemoryError);
  CHECK_NOTHROW(vk::check(VK_SUCCESS, "vkFoo()", "a.cpp", 1));
}

TEST_CASE("with KILN_VALIDATION=1 a validation message fails the next synchronisation") {
  if (!vk::validation_enabled()) {
    MESSAGE("validation layers are off (run with KILN_VALIDATION=1, as CI does)");
    return;
  }
  auto& ctx = vk::Context::get(0);
  // Misuse the API on kiln's device: a zero-sized buffer is invalid usage.
  VkBufferCreateInfo bi{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bi.size = 0;
  bi.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT;
  VkBuffer buf = VK_NULL_HANDLE;
  (void)vkCreateBuffer(ctx.handle(), &bi, nullptr, &buf);
  if (buf != VK_NULL_HANDLE) vkDestroyBuffer(ctx.handle(), buf, nullptr);
  CHECK_THROWS_WITH_AS(synchronize(kGpu), doctest::Contains("validation layer reported"),
                       DeviceError);
  // The message was consumed: the device keeps working.
  CHECK_NOTHROW(synchronize(kGpu));
}

TEST_CASE("contiguous 32-bit kernels take the 4-wide path and equal the CPU") {
  // Counts divisible by 4 with unit-stride and scalar operands (vec4 loads), and a
  // count that is not (the scalar kernel).
  for (std::int64_t n : {4, 1024, 4099 * 4, 4097}) {
    CAPTURE(n);
    differential({host_random({n}, f32), host_random({}, f32)},
                 [](auto& x) { return x[0] * x[1] - 1.0f; });
    differential({host_random({n}, i32), host_random({n}, i32)},
                 [](auto& x) { return maximum(x[0], x[1]) + x[0]; });
    differential({host_random({n}, u32)}, [](auto& x) { return bitcast(x[0], f32); });
    differential({host_random({n}, f32)}, [](auto& x) { return astype(x[0], i32); });
  }
}

namespace {
// The eviction tests need a small limit: suite vulkan-pipeline-limit sets 64.
bool small_limit(const vk::PipelineCache& cache) {
  if (cache.limit() <= 64) return true;
  MESSAGE("the limit is ", cache.limit(), ": suite vulkan-pipeline-limit runs this with 64");
  return false;
}
}  // namespace

TEST_CASE("the pipeline cache evicts the least recently used past its limit") {
  auto& cache = vk::Context::get(0).pipelines();
  if (!small_limit(cache)) return;
  // Reductions of (n, 7) arrays bake n into the kernel: one pipeline per n.
  const auto total = [](std::int64_t n) {
    return sum(ones({n, 7}, f32, kGpu)).item<float>();
  };
  const vk::PipelineStats before = cache.stats();
  std::int64_t n = 1;
  for (; n <= 2000 && cache.stats().pipelines - before.pipelines < cache.limit() + 40; ++n) {
    CHECK(total(n) == static_cast<float>(7 * n));
  }
  const vk::PipelineStats after = cache.stats();
  CAPTURE(n);
  CHECK(after.pipelines - before.pipelines >= cache.limit() + 40);
  CHECK(after.cached <= cache.limit());
  CHECK(after.evicted - before.evicted >= 40);
  // Evicted kernels are compiled again when needed, and give the same values.
  CHECK(total(1) == 7.0f);
  CHECK(total(2) == 14.0f);
  CHECK(cache.stats().cached <= cache.limit());
}

namespace {
// Fused kernels of each kind: a matmul epilogue whose matmul reads a transposed
// operand (the transpose is folded into the matmul), a reduction prologue and
// an elementwise group.
std::tuple<Array, Array, Array> fused_kinds(const Array& x, const Array& w, const Array& b) {
  return {relu(matmul(x, transpose(w)) + b), sum(exp(x) * 2.0f, {1}), tanh(x) * 3.0f + x};
}
void check_fused_kinds(const std::tuple<Array, Array, Array>& gpu, const Array& x,
                       const Array& w, const Array& b) {
  const auto cpu = fused_kinds(x, w, b);
  check_close_to(std::get<0>(gpu), std::get<0>(cpu));
  check_close_to(std::get<1>(gpu), std::get<1>(cpu));
  check_close_to(std::get<2>(gpu), std::get<2>(cpu));
}
// fused_kinds' inputs: on the host (the CPU reference) and on the device.
struct FusedInputs {
  Array x = host_random({8, 16}, f32), w = host_random({12, 16}, f32), b = host_random({12}, f32);
  Array gx = to_device(x, kGpu), gw = to_device(w, kGpu), gb = to_device(b, kGpu);
  void check(const std::tuple<Array, Array, Array>& gpu) const { check_fused_kinds(gpu, x, w, b); }
};
}  // namespace

TEST_CASE("a compiled program's cache hit builds no kernel key and looks no pipeline up") {
  auto& cache = vk::Context::get(0).pipelines();
  const FusedInputs in;
  auto f = filter_jit(fused_kinds);
  in.check(f(in.gx, in.gw, in.gb));  // compiles, plans, keeps
  const vk::PipelineStats before = cache.stats();
  for (int i = 0; i < 5; ++i) in.check(f(in.gx, in.gw, in.gb));
  const vk::PipelineStats after = cache.stats();
  // Every step of the program is a fused kernel (or the epilogue's transpose):
  // their launches are kept, so no call after the first looks anything up.
  CHECK(after.lookups == before.lookups);
  CHECK(after.keys == before.keys);
  CHECK(after.pipelines == before.pipelines);
  CHECK(after.kept_hits - before.kept_hits >= 5 * f.last_run().launches);
}

namespace {
// One step per equation (fusion off): each family whose launches are kept per
// step (Backend::eval_step), with a matmul reading both operands transposed
// (two transposes and the product: three launches of one step), a
// concatenate of three pieces (three launches, each kept in its own slot) and
// a scatter (the operand's copy and the scatter kernel).
std::vector<Array> single_steps(const Array& x, const Array& w, const Array& idx) {
  const Array prod = matmul(transpose(x), transpose(w));  // (16, 8) @ (8, 12) -> (16, 12)
  return {exp(x) * 2.0f,
          sum(x, {1}),
          argmax(x, 1),
          prod,
          concatenate({x, x * 3.0f, -x}, 1),
          transpose(w),
          take_along_axis(x, idx, 1),
          one_hot(reshape(idx, {8}), 5),
          unfold(reshape(x, {1, 8, 16}), Window{.size = {3}, .padding = {{1, 1}}}),
          scatter_add_along_axis(x, idx, take_along_axis(x, idx, 1) * 2.0f, 1)};
}
}  // namespace

TEST_CASE("a compiled program's single-equation steps keep their launches too") {
  auto& cache = vk::Context::get(0).pipelines();
  const Array x = host_random({8, 16}, f32), w = host_random({12, 8}, f32);
  const Array idx = array<std::int32_t>({3, -1, 0, 15, 7, 2, 9, 4}, {8, 1});
  const std::vector<Array> want = single_steps(x, w, idx);
  auto f = filter_jit(single_steps, {.name = "single_steps", .fusion = {.enabled = false}});
  const Array gx = to_device(x, kGpu), gw = to_device(w, kGpu), gi = to_device(idx, kGpu);
  const auto check = [&](const std::vector<Array>& got) {
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      INFO("output " << i);
      check_close_to(got[i], want[i]);
    }
  };
  check(f(gx, gw, gi));  // compiles and keeps
  const vk::PipelineStats before = cache.stats();
  for (int i = 0; i < 3; ++i) check(f(gx, gw, gi));
  const vk::PipelineStats after = cache.stats();
  CHECK(after.lookups == before.lookups);
  CHECK(after.keys == before.keys);
  CHECK(after.pipelines == before.pipelines);
  CHECK(after.kept_hits - before.kept_hits >= 3 * f.last_run().launches);
  // Other values through the same kept launches; an index out of range is
  // still checked on every call (on the device: the error comes from the
  // synchronisation after the call).
  const Array x2 = host_random({8, 16}, f32);
  const std::vector<Array> want2 = single_steps(x2, w, idx);
  const std::vector<Array> got2 = f(to_device(x2, kGpu), gw, gi);
  for (std::size_t i = 0; i < got2.size(); ++i) check_close_to(got2[i], want2[i]);
  const Array bad = to_device(array<std::int32_t>({3, -1, 0, 16, 7, 2, 9, 4}, {8, 1}), kGpu);
  CHECK_THROWS_WITH_AS(([&] { (void)f(gx, gw, bad); synchronize(kGpu); }()),
                       doctest::Contains("index 16 is out of range"), IndexError);
  CHECK(f.trace_count() == 1);
}

TEST_CASE("the pipeline cache evicts a kept launch's pipeline like any other, and the next call "
          "compiles it again") {
  auto& cache = vk::Context::get(0).pipelines();
  if (!small_limit(cache)) return;
  const FusedInputs in;
  auto f = filter_jit(fused_kinds);
  in.check(f(in.gx, in.gw, in.gb));
  in.check(f(in.gx, in.gw, in.gb));
  // Other kernels, more than the cache holds: each (n, 3) reduction is a new
  // pipeline, so the kept ones become the least recently used and go.
  const vk::PipelineStats kept = cache.stats();
  for (std::int64_t n = 1; cache.stats().pipelines - kept.pipelines < cache.limit() + 8; ++n) {
    CHECK(sum(ones({n, 3}, f32, kGpu)).item<float>() == static_cast<float>(3 * n));
  }
  CHECK(cache.stats().cached <= cache.limit());
  // Nothing kept refers to a destroyed pipeline: the call looks each kernel up
  // again (compiling it again), with the same values.
  const vk::PipelineStats before = cache.stats();
  in.check(f(in.gx, in.gw, in.gb));
  const vk::PipelineStats after = cache.stats();
  CHECK(after.lookups - before.lookups >= f.last_run().launches);
  CHECK(after.pipelines > before.pipelines);
  CHECK(after.cached <= cache.limit());
  // ...and keeps them again.
  in.check(f(in.gx, in.gw, in.gb));
  CHECK(cache.stats().lookups == after.lookups);
}

// Kept launches are touched on every hit (LRU), so the churn evicts the other
// kernels first; whichever goes, the runners' values must not change.
TEST_CASE("the pipeline cache evicts under kept launches that other threads are running") {
  auto& cache = vk::Context::get(0).pipelines();
  if (!small_limit(cache)) return;
  const FusedInputs in;
  auto f = filter_jit(fused_kinds);
  const auto expected = f(in.gx, in.gw, in.gb);  // the device's bits, checked against the CPU
  in.check(expected);
  const auto same = [&](const std::tuple<Array, Array, Array>& r) {
    return as_doubles(std::get<0>(r)) == as_doubles(std::get<0>(expected)) &&
           as_doubles(std::get<1>(r)) == as_doubles(std::get<1>(expected)) &&
           as_doubles(std::get<2>(r)) == as_doubles(std::get<2>(expected));
  };
  const vk::PipelineStats before = cache.stats();
  std::atomic<bool> stop{false};
  std::atomic<int> wrong{0}, calls{0};
  std::vector<std::thread> runners;
  for (int t = 0; t < 2; ++t) {
    runners.emplace_back([&] {
      while (!stop.load()) {
        if (!same(f(in.gx, in.gw, in.gb))) ++wrong;
        ++calls;
      }
    });
  }
  // Meanwhile, this thread compiles more kernels than the cache holds.
  for (std::int64_t n = 1; cache.stats().pipelines - before.pipelines < 2 * cache.limit(); ++n) {
    CHECK(sum(ones({n, 5}, f32, kGpu)).item<float>() == static_cast<float>(5 * n));
  }
  stop = true;
  for (auto& t : runners) t.join();
  CHECK(wrong.load() == 0);
  CHECK(calls.load() > 0);
  CHECK(cache.stats().cached <= cache.limit());
  in.check(f(in.gx, in.gw, in.gb));
}

// Run by the test below in a child process: what a missing driver looks like.
TEST_CASE("child: no Vulkan driver") {
  if (std::getenv("KILN_TEST_CHILD") == nullptr) return;
  try {
    (void)to_device(ones({2}), Device::vulkan(0));
    std::printf("no error\n");
  } catch (const Error& e) {
    std::printf("error=%s\n", e.what());
  }
}

TEST_CASE("no Vulkan driver installed is a DeviceError that says what to install") {
  const std::string cmd =
      "KILN_TEST_CHILD=1 VK_ICD_FILENAMES=/nonexistent/kiln-none.json "
      "VK_DRIVER_FILES=/nonexistent/kiln-none.json /proc/" +
      std::to_string(getpid()) + "/exe -tc='child: no Vulkan driver' 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[1024];
  while (std::fgets(buf, sizeof(buf), p) != nullptr) out += buf;
  CHECK(pclose(p) == 0);
  CAPTURE(out);
  CHECK(out.find("no Vulkan driver (ICD) is installed") != std::string::npos);
  CHECK(out.find("mesa-vulkan-drivers") != std::string::npos);
}

TEST_CASE("a child fork()ed after Vulkan was initialised gets a DeviceError, not a hang") {
  // Initialise Vulkan here, then fork: the child must not touch the parent's
  // device (lavapipe hung there: issue 41). The CPU device works in the child.
  const Array a = full(Shape{4}, 2.0f, f32, Device::vulkan(0));
  REQUIRE(sum(a).item<float>() == 8.0f);
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::alarm(60);  // a hang ends the child, and the parent sees no message
    std::string msg;
    try {
      (void)full(Shape{4}, 1.0f, f32, Device::vulkan(0)).to_vector<float>();
      msg = "vulkan ran;";
    } catch (const DeviceError& e) {
      msg = std::string(e.what()) + ";";
    }
    try {
      (void)a.to_vector<float>();  // the parent's array
      msg += "parent array read;";
    } catch (const DeviceError& e) {
      msg += "parent array: DeviceError;";
    }
    msg += "cpu " + std::to_string(sum(full(Shape{4}, 3.0f, f32, Device::cpu())).item<float>());
    (void)!::write(fds[1], msg.data(), msg.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string out;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof(buf))) > 0;) out.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CAPTURE(out);
  CHECK(WIFEXITED(status));
  CHECK(out.find("[vulkan] this process was fork()ed from process " + std::to_string(::getpid()) +
                 " after that process had initialised Vulkan") != std::string::npos);
  CHECK(out.find("parent array: DeviceError;") != std::string::npos);
  CHECK(out.find("cpu 12") != std::string::npos);
  // The parent goes on.
  CHECK(sum(a).item<float>() == 8.0f);
}

// f16 matmul takes the tensor cores where the device has cooperative matrices
// (Capabilities::coopmat; a GPU such as NVIDIA's), else the FMA kernels. Integer
// inputs in [-3, 3] keep every product and sum exact (|sum| <= 9 K < 2048), so
// the device must give the CPU's bits. Shapes: whole 128 x 128 blocks, tiles
// past M and N (multiples of 16, not of 128), batches with a broadcast operand,
// and a shape the cooperative kernel leaves to the FMA path (N % 16 != 0).
TEST_CASE("f16 matmul on cooperative matrices (where the device has them) equals the CPU") {
  if (!vk::Context::get(0).caps().storage_16bit) {
    MESSAGE("skipped: no f16 arrays on this device");
    return;
  }
  const std::string coop = vk::Context::get(0).caps().coopmat ? "yes" : "no";
  MESSAGE("cooperative matrices: " << coop);
  const auto ints = [](const Shape& s) {
    const auto n = static_cast<std::size_t>(numel(s));
    std::uniform_int_distribution<int> pick(-3, 3);
    std::vector<float> v(n);
    for (auto& x : v) x = static_cast<float>(pick(rng()));
    return astype(Array::from_data<float>(v, s), f16);
  };
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{128, 64}, {64, 128}}, {{256, 80}, {80, 384}}, {{144, 48}, {48, 80}},
      {{16, 16}, {16, 16}},   {{3, 32, 16}, {3, 16, 48}}, {{2, 1, 48, 32}, {3, 32, 64}},
      {{64, 32}, {32, 40}}};
  for (const auto& [sa, sb] : cases) {
    CAPTURE(to_string(sa));
    CAPTURE(to_string(sb));
    const Array a = ints(sa), b = ints(sb);
    const Array want = matmul(a, b);
    const Array got = matmul(to_device(a, kGpu), to_device(b, kGpu));
    REQUIRE(got.dtype() == f16);
    REQUIRE(got.shape() == want.shape());
    CHECK(astype(got, f32).to_vector<float>() == astype(want, f32).to_vector<float>());
  }
}

// The cooperative kernel's SPIR-V assembles and passes SPIRV-Tools' Vulkan
// validation on every machine, with or without the extension to run it.
TEST_CASE("the cooperative-matrix matmul kernel is valid SPIR-V for 32- and 64-wide subgroups") {
  for (std::uint32_t sg : {32u, 64u}) {
    const Aval out{f16, {3, 144, 80}};
    const vk::MatmulSpec s = vk::matmul_spec({3, 144, 48}, {48, 80}, out);
    const vk::KernelSource src = vk::coop_matmul_source(s, sg);
    CHECK(src.text.find("OpCooperativeMatrixMulAddNV") != std::string::npos);
    CHECK_NOTHROW(vk::spv::assemble(src.text, false));
  }
}
