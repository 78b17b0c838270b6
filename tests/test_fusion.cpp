// Fused elementwise kernels (dsl/fusion.hpp, Backend::eval_fused) on the device
// KILN_DEVICE names: the grouping fuse() makes, and every fused kernel against
// the same equations evaluated one at a time (eval_all), bit for bit: chains with
// broadcasting, where/astype/bitcast, wrapping integers, bool and f16 values,
// several outputs, outputs written in place into an input's buffer, empty
// arrays, sizes past one CPU chunk and past 65535 * 256 elements; then
// Executable end to end with fusion on and off.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <kiln/dsl/backend.hpp>
#include <kiln/dsl/executable.hpp>
#include <kiln/dsl/fusion.hpp>
#include <kiln/dsl/program.hpp>
#include <kiln/dsl/trace.hpp>
#include <kiln/kiln.hpp>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kiln/backends/cpu/jit.hpp"
#include "kiln/backends/cpu/simd.hpp"
#if KILN_HAVE_VULKAN
#include "kiln/backends/vulkan/context.hpp"
#include "kiln/backends/vulkan/pipeline.hpp"
#endif
#include "fusion_util.hpp"

using namespace kiln;
using kiln::fusion_test::bytes_of;
using kiln::fusion_test::check_equal;
using kiln::fusion_test::check_fused;
using kiln::fusion_test::trace;

namespace {

Device dev() { return default_device(); }

// Elements in one row of a dispatch grid: maxComputeWorkGroupCount[0] * 256 on
// a Vulkan device (the suites lower the count with KILN_VK_MAX_GROUP_COUNT, so
// the 2-D grids come with arrays of a few MiB); 65535 * 256 on the CPU.
std::int64_t grid_row() {
  for (const DeviceInfo& d : devices()) {
    if (d.device == dev() && d.max_workgroup_count[0] > 0) {
      return std::int64_t{d.max_workgroup_count[0]} * 256;
    }
  }
  return 65535LL * 256;
}

std::mt19937& rng() {
  static std::mt19937 g(42);
  return g;
}

// Host values of `dtype` (floats in [lo, hi], ints scaled by 2^20 so products
// wrap, bool at random), as a vector of bytes a device array is made from.
struct HostData {
  DType dtype;
  Shape shape;
  std::vector<std::byte> bytes;
};

HostData host_random(const Shape& shape, DType dtype, double lo = -3, double hi = 3) {
  const auto n = static_cast<std::size_t>(numel(shape));
  HostData h{dtype, shape, std::vector<std::byte>(n * size_of(dtype == f16 ? f32 : dtype))};
  std::uniform_real_distribution<double> u(lo, hi);
  for (std::size_t i = 0; i < n; ++i) {
    const double x = u(rng());
    switch (dtype) {
      case DType::kF64: std::memcpy(&h.bytes[i * 8], &x, 8); break;
      case DType::kI32: {
        const auto v = static_cast<std::int32_t>(x * (1 << 20));
        std::memcpy(&h.bytes[i * 4], &v, 4);
        break;
      }
      case DType::kU32: {
        const auto v = static_cast<std::uint32_t>(std::abs(x) * (1 << 30));
        std::memcpy(&h.bytes[i * 4], &v, 4);
        break;
      }
      case DType::kBool: h.bytes[i] = static_cast<std::byte>(x > 0 ? 1 : 0); break;
      default: {  // f32 (f16 is made from f32 on the device)
        const auto v = static_cast<float>(x);
        std::memcpy(&h.bytes[i * 4], &v, 4);
        break;
      }
    }
  }
  return h;
}

// A fresh device array holding `h` (each call its own buffer).
Array on_device(const HostData& h) {
  const DType host = h.dtype == f16 ? f32 : h.dtype;
  auto buf = HostBuffer::allocate(h.bytes.size());
  if (!h.bytes.empty()) std::memcpy(buf->host_data(), h.bytes.data(), h.bytes.size());
  Array a = to_device(Array(host, h.shape, std::move(buf)), dev());
  return h.dtype == f16 ? astype(a, f16) : a;
}

Array random_array(const Shape& shape, DType dtype, double lo = -3, double hi = 3) {
  return on_device(host_random(shape, dtype, lo, hi));
}

std::size_t fused_steps(const std::vector<Step>& steps) {
  std::size_t n = 0;
  for (const Step& s : steps) n += s.kernel != nullptr;
  return n;
}

bool has_f16() {
  try {
    (void)astype(zeros({1}, f32, dev()), f16);
    return true;
  } catch (const DTypeError&) {
    return false;
  }
}

// The arguments of `step` (a step of fuse(p)) when the program's inputs are
// `inputs`; constants come from the program.
std::vector<Array> step_args(const Program& p, const Step& step, const std::vector<Array>& inputs) {
  std::vector<Array> env(p.num_values());
  for (std::size_t i = 0; i < inputs.size(); ++i) env[p.inputs[i]] = inputs[i];
  for (std::size_t i = 0; i < p.constants.size(); ++i) env[p.constants[i]] = p.constant_values[i];
  std::vector<Array> args;
  for (ValueId v : step.inputs) args.push_back(env[v]);
  return args;
}

bool on_vulkan() { return dev().kind == Device::Kind::kVulkan; }

}  // namespace

TEST_CASE("fuse: a chain with a broadcast bias is one kernel, printed with its body") {
  const Program p = trace(
      [](const std::vector<Array>& x) {
        return std::vector<Array>{relu(x[0] * 2.0f + x[1])};
      },
      {{f32, {4, 8}}, {f32, {8}}});
  const std::vector<Step> steps = fuse(p);
  REQUIRE(steps.size() == 1);
  REQUIRE(steps[0].kernel != nullptr);
  CHECK(steps[0].kernel->shape == Shape{4, 8});
  CHECK(steps[0].kernel->body.equations.size() == 3);
  CHECK(steps[0].inputs.size() == 3);  // x0, the folded 2, x1
  const std::string text = to_string(p, steps);
  CHECK(text.rfind("compiled program: 1 launches\n  [0] fused[shape=(4, 8)] { lambda ; ", 0) == 0);
  CHECK(text.find("multiply") != std::string::npos);
  CHECK(text.find("relu") != std::string::npos);
  const std::vector<Step> off = fuse(p, FusionOptions{false});
  CHECK(off.size() == 3);
  CHECK(fused_steps(off) == 0);
}

TEST_CASE("fuse: matmuls and reductions split an MLP into single and fused steps") {
  const Program p = trace(
      [](const std::vector<Array>& x) {
        Array h = tanh(matmul(x[0], x[1]) + x[2]);
        Array y = matmul(h, x[3]) + x[4];
        return std::vector<Array>{sum(y * y) * 0.5f};
      },
      {{f32, {16, 32}}, {f32, {32, 64}}, {f32, {64}}, {f32, {64, 8}}, {f32, {8}}});
  const std::vector<Array> in = {random_array({16, 32}, f32), random_array({32, 64}, f32),
                                 random_array({64}, f32), random_array({64, 8}, f32),
                                 random_array({8}, f32)};
  // Elementwise groups only: matmul, fused(add tanh), matmul, fused(add
  // multiply), sum, multiply.
  const std::vector<Step> plain = check_fused(p, in);
  (void)plain;
  const std::vector<Step> steps = fuse(p, FusionOptions{true, false});
  REQUIRE(steps.size() == 6);
  CHECK(fused_steps(steps) == 2);
  CHECK(steps[0].equation->prim == Prim::kMatmul);
  CHECK(steps[1].kernel->body.equations.size() == 2);
  CHECK(steps[2].equation->prim == Prim::kMatmul);
  CHECK(steps[3].kernel->body.equations.size() == 2);
  CHECK(steps[4].equation->prim == Prim::kSum);
  CHECK(fuse(p, FusionOptions{false}).size() == 8);
  // With anchors each matmul takes its epilogue: fused(matmul add tanh),
  // fused(matmul add multiply), sum, multiply.
  const std::vector<Step> anchored = fuse(p);
  REQUIRE(anchored.size() == 4);
  for (std::size_t i : {0, 1}) {
    REQUIRE(anchored[i].kernel != nullptr);
    CHECK(anchored[i].kernel->kind == FusedKernel::Kind::kMatmulEpilogue);
    CHECK(anchored[i].kernel->body.equations.size() == 3);
    CHECK(anchored[i].kernel->body.equations[0].prim == Prim::kMatmul);
  }
  CHECK(anchored[2].equation->prim == Prim::kSum);
}

TEST_CASE("fused f32 chains with broadcasting equal the unfused equations") {
  // (B, N) with (N), (B, 1) and a scalar; sizes cross CPU chunks and row ends.
  for (const Shape& s : {Shape{3, 5}, Shape{1000, 37}, Shape{2, 3, 4099}}) {
    CAPTURE(to_string(s));
    const Shape row{s.back()};
    Shape col = s;
    col.back() = 1;
    const Program p = trace(
        [](const std::vector<Array>& x) {
          Array a = x[0] * x[1] + x[2];
          Array b = sigmoid(a) * tanh(a) - exp(-abs(a)) + sqrt(abs(a)) * rsqrt(abs(a) + 1.0f);
          Array c = maximum(b, x[1]) / minimum(a, x[2] - 4.0f);
          return std::vector<Array>{c + log(abs(c) + 1.0f), power(abs(a), x[1])};
        },
        {{f32, s}, {f32, row}, {f32, col}});
    const auto steps = check_fused(
        p, {random_array(s, f32), random_array(row, f32), random_array(col, f32)});
    CHECK(fused_steps(steps) == 1);
    CHECK(steps.size() == 2);  // and x2 - 4, of another shape
  }
}

TEST_CASE("an element's value does not depend on its position in the array") {
  // Kernels run whole SIMD batches and a padded last batch: x[i] computed in an
  // array of any length, fused or not, equals x[i] computed alone.
  const auto f = [](const Array& x) {
    return sigmoid(x) * tanh(x) + exp(-x) * log(abs(x) + 0.5f) - sqrt(abs(x)) / rsqrt(abs(x) + 1.0f);
  };
  for (std::int64_t n : {1, 3, 7, 15, 16, 17, 31, 33, 63, 65, 100}) {
    CAPTURE(n);
    const HostData h = host_random({n}, f32);
    const Array x = on_device(h);
    const auto whole = bytes_of(f(x));  // unfused, eagerly
    const Executable jitted(
        trace([&](const std::vector<Array>& a) { return std::vector<Array>{f(a[0])}; },
              {{f32, {n}}}),
        dev(), "f");
    std::vector<Array> args{x};
    CHECK(bytes_of(jitted.run(args)[0]) == whole);  // one fused kernel
    for (std::int64_t i = 0; i < n; ++i) {
      const auto at = h.bytes.begin() + i * 4;
      const HostData one{f32, {1}, std::vector<std::byte>(at, at + 4)};
      const auto alone = bytes_of(f(on_device(one)));
      CHECK(std::memcmp(alone.data(), whole.data() + i * 4, 4) == 0);
    }
  }
}

TEST_CASE("fused where, comparisons, astype and bitcast; several outputs") {
  const Shape s{7, 301};
  const Program p = trace(
      [](const std::vector<Array>& x) {
        Array m = x[0] > x[1];                               // bool output
        Array z = where(m, x[0], x[1] * 2.0f);              // read inside and out
        Array i = astype(z * 1000.0f, i32);                 // saturating, truncating
        Array u = bitcast(i, u32);
        Array back = astype(shift_right_logical(u, astype(x[2], u32)), f32);
        Array any = logical_or(m, logical_not(x[2] > 0));   // bool ops
        return std::vector<Array>{m, z, i, back, astype(any, f32)};
      },
      {{f32, s}, {f32, {301}}, {f32, {7, 1}}});
  const auto steps = check_fused(
      p, {random_array(s, f32, -1e7, 1e7), random_array({301}, f32),
          random_array({7, 1}, f32, -2, 40)});
  // x1 * 2 (301), astype(x2) (7, 1) and the (7, 1) bool chain have shapes of
  // their own; the rest is one kernel with five outputs.
  REQUIRE(steps.size() == 4);
  CHECK(fused_steps(steps) == 2);
  REQUIRE(steps[3].kernel != nullptr);
  CHECK(steps[3].kernel->body.equations.size() == 9);
  CHECK(steps[3].outputs.size() == 5);
}

TEST_CASE("fused integer chains wrap, divide by zero to 0 and shift past 31 to 0") {
  const Shape s{33, 129};
  const Program pi = trace(
      [](const std::vector<Array>& x) {
        Array prod = x[0] * x[1] + x[0];                     // wraps mod 2^32
        Array q = prod / (x[1] - x[1] / 2 * 2);              // x / 0 == 0, INT_MIN / -1
        Array sh = shift_left(q, bitwise_and(x[1], full_like(x[1], 63)));
        Array n = abs(neg(sh)) + relu(x[0]);
        Array b = bitwise_xor(bitwise_not(n), bitwise_or(x[0], x[1]));
        return std::vector<Array>{b, maximum(b, x[0]), minimum(q, x[1]), n == q};
      },
      {{i32, s}, {i32, {129}}});
  HostData a = host_random(s, i32), c = host_random({129}, i32);
  // Put the edge values in: INT_MIN, -1, 0.
  const std::int32_t edges[] = {std::numeric_limits<std::int32_t>::min(), -1, 0, 1, 31, 32};
  std::memcpy(a.bytes.data(), edges, sizeof(edges));
  std::memcpy(c.bytes.data(), edges, sizeof(edges));
  check_fused(pi, {on_device(a), on_device(c)});

  const Program pu = trace(
      [](const std::vector<Array>& x) {
        Array d = (x[0] - x[1]) * x[1] / (x[1] - x[1] / 3 * 3);
        Array r = shift_right_logical(d, x[1] / 1000000);  // amounts around 32
        return std::vector<Array>{r, astype(r, f32), astype(astype(d, f64), i32)};
      },
      {{u32, s}, {u32, {129}}});
  check_fused(pu, {random_array(s, u32), random_array({129}, u32)});
}

TEST_CASE("fused float to int conversions saturate and NaN max/min propagate") {
  const Shape s{5000};
  const Program p = trace(
      [](const std::vector<Array>& x) {
        Array big = x[0] * 1e10f;
        Array nan = log(x[0]);  // NaN for negative x
        return std::vector<Array>{astype(big, i32), astype(big, u32), astype(nan, i32),
                                  maximum(nan, x[0]), minimum(x[0], nan), relu(nan),
                                  astype(nan, bool_)};
      },
      {{f32, s}});
  check_fused(p, {random_array(s, f32)});
}

TEST_CASE("fused f64 chains equal the unfused equations") {
  if (on_vulkan()) {
    try {
      (void)zeros({1}, f64, dev());
    } catch (const DTypeError&) {
      return;  // the device has no f64
    }
  }
  const Program p = trace(
      [](const std::vector<Array>& x) {
        Array a = x[0] * x[1] + 1.0;
        return std::vector<Array>{tanh(a) + exp(a) * sigmoid(-a), astype(a, f32)};
      },
      {{f64, {9, 17}}, {f64, {17}}});
  check_fused(p, {random_array({9, 17}, f64), random_array({17}, f64)});
}

TEST_CASE("fused f16 values are rounded where the unfused program stores them") {
  const Program p = trace(
      [](const std::vector<Array>& x) {
        Array h = astype(x[0], f16);
        Array g = h * h + astype(x[1], f16);  // f16 intermediates
        return std::vector<Array>{g, astype(exp(g) - h, f32)};
      },
      {{f32, {3, 1001}}, {f32, {1001}}});
  const std::vector<Array> in = {random_array({3, 1001}, f32), random_array({1001}, f32)};
  if (!has_f16()) {
    // The CPU refuses f16 fused or not, with the unfused path's error.
    const std::vector<Step> steps = fuse(p);
    REQUIRE(steps.size() == 2);  // astype(x1) has another shape
    REQUIRE(steps[1].kernel != nullptr);
    const Array f16_x1 = Array(f16, {1001}, HostBuffer::allocate(2002));
    const std::vector<Array> args = {in[0], f16_x1};
    CHECK_THROWS_WITH_AS(backend_for(dev()).eval_fused(*steps[1].kernel, args, {}),
                         doctest::Contains("[astype] f16 is not supported"), DTypeError);
    return;
  }
  check_fused(p, in);
}

TEST_CASE("fused f16 and bf16 chains: comparisons, where, aliases, scalars, conversions") {
  if (!has_f16()) return;
  for (const DType half : {f16, bf16}) {
    CAPTURE(name(half));
    const Program p = trace(
        [half](const std::vector<Array>& x) {
          const Array h = astype(x[0], half);
          const Array s = astype(x[2], half);                  // one element for all
          const Array t = tanh(h) * s + stop_gradient(h);      // rounded twice
          const Array m = where(t > s, t / s, -t);              // compare on rounded values
          const Array i = astype(m * 7.0f, i32);                // a 16-bit value to i32
          const Array back = astype(astype(i, f32) * 0.1f, half) + sqrt(abs(h));
          return std::vector<Array>{m, i, back, astype(back - t, f32) * x[1]};
        },
        {{f32, {5, 777}}, {f32, {777}}, {f32, {}}});
    const std::vector<Array> in = {random_array({5, 777}, f32), random_array({777}, f32),
                                   random_array({}, f32, 0.5, 2.0)};
    const std::vector<Step> steps = check_fused(p, in);
    CHECK(fused_steps(steps) >= 1);
  }
}

TEST_CASE("f16 and bf16 matmul epilogues and reduction prologues round as unfused") {
  if (!has_f16()) return;
  for (const DType half : {f16, bf16}) {
    CAPTURE(name(half));
    const Program p = trace(
        [half](const std::vector<Array>& x) {
          const Array a = astype(x[0], half), w = astype(x[1], half), bias = astype(x[2], half);
          const Array y = relu(matmul(a, w) + bias) * 0.5f;      // an epilogue
          const Array s = sum(exp(a * 0.25f) - a, {1});           // a prologue
          return std::vector<Array>{y, s, max(tanh(y), {0})};
        },
        {{f32, {37, 64}}, {f32, {64, 50}}, {f32, {50}}});
    const std::vector<Array> in = {random_array({37, 64}, f32), random_array({64, 50}, f32),
                                   random_array({50}, f32)};
    const std::vector<Step> steps = check_fused(p, in);
    std::size_t anchored = 0;
    for (const Step& st : steps) {
      anchored += st.kernel != nullptr && st.kernel->kind != FusedKernel::Kind::kElementwise;
    }
    CHECK(anchored >= 2);
  }
}

TEST_CASE("fused outputs go into a given input buffer when asked") {
  // Over several CPU chunks; out0 overwrites x0 while x0 is read by later
  // equations of the same chunk, out1 overwrites x1 (a swap-like pattern).
  for (std::int64_t n : {std::int64_t{1}, std::int64_t{1000}, std::int64_t{3 * 4096 + 5}}) {
    CAPTURE(n);
    const Program p = trace(
        [](const std::vector<Array>& x) {
          Array a = x[1] * 2.0f + 1.0f;
          Array b = exp(x[0] * -0.5f) + a;
          return std::vector<Array>{a, b};
        },
        {{f32, {n}}, {f32, {n}}, {f32, {}}});
    const std::vector<Step> steps = fuse(p);
    REQUIRE(steps.size() == 1);
    const Step& s = steps[0];
    REQUIRE(s.kernel != nullptr);
    REQUIRE(s.outputs.size() == 2);
    const HostData h0 = host_random({n}, f32), h1 = host_random({n}, f32);
    const Array s0 = random_array({}, f32);
    // The reference, on arrays of their own.
    const std::vector<Array> want = eval(p, std::vector<Array>{on_device(h0), on_device(h1), s0});
    // Step inputs are program inputs in order of first use: map them by value.
    const Array x0 = on_device(h0), x1 = on_device(h1);
    std::vector<Array> args = step_args(p, s, {x0, x1, s0});
    // out0 (a) into x0's buffer, out1 (b) into x1's buffer.
    const std::vector<std::shared_ptr<Buffer>> into = {x0.buffer(), x1.buffer()};
    const auto bufs = backend_for(dev()).eval_fused(*s.kernel, args, into);
    CHECK(bufs[0] == x0.buffer());
    CHECK(bufs[1] == x1.buffer());
    check_equal(Array(f32, {n}, bufs[0]), want[0]);
    check_equal(Array(f32, {n}, bufs[1]), want[1]);
  }
}

TEST_CASE("fused kernels on empty arrays return empty outputs") {
  const Program p = trace(
      [](const std::vector<Array>& x) {
        return std::vector<Array>{exp(x[0] + x[1]) > 1.0f, x[0] * 3.0f - x[1]};
      },
      {{f32, {0, 5}}, {f32, {5}}});
  const std::vector<Step> steps = fuse(p);
  REQUIRE(steps.size() == 2);  // two independent chains
  const Array x0 = random_array({0, 5}, f32), x1 = random_array({5}, f32);
  for (const Step& s : steps) {
    REQUIRE(s.kernel != nullptr);
    std::vector<Array> args;
    for (ValueId v : s.inputs) args.push_back(v == p.inputs[0] ? x0 : x1);
    const auto bufs = backend_for(dev()).eval_fused(*s.kernel, args, {});
    REQUIRE(bufs.size() == 1);
    CHECK(bufs[0]->nbytes() == 0);
    const std::vector<std::shared_ptr<Buffer>> into = {x0.buffer()};
    if (p.avals[s.outputs[0]] == x0.aval()) {
      CHECK(backend_for(dev()).eval_fused(*s.kernel, args, into)[0] == x0.buffer());
    }
  }
  check_fused(p, {x0, x1});
}

TEST_CASE("fused kernels past 65535 * 256 elements (2-D grids, many chunks)") {
  const std::int64_t n = grid_row() + 3;
  const Program p = trace(
      [](const std::vector<Array>& x) {
        Array a = x[0] * x[1] + 1.0f;
        return std::vector<Array>{a * a - x[0], a > 0.0f};
      },
      {{f32, {n}}, {f32, {}}});
  check_fused(p, {random_array({n}, f32), random_array({}, f32)});
  // A broadcast over a large 2-D shape: rows that do not align with chunks.
  const std::int64_t rows = grid_row() / 4097 + 2;
  const Program q = trace(
      [](const std::vector<Array>& x) {
        return std::vector<Array>{relu(x[0] - x[1]) * x[2]};
      },
      {{f32, {rows, 4097}}, {f32, {4097}}, {f32, {rows, 1}}});
  check_fused(q, {random_array({rows, 4097}, f32), random_array({4097}, f32),
                  random_array({rows, 1}, f32)});
  // Counts that take the vector paths (8 or 4 elements per item), several f32
  // outputs stored as 4-vectors, a broadcast scalar input.
  for (std::int64_t extra : {8, 4}) {
    CAPTURE(extra);
    const std::int64_t big = grid_row() + extra;
    const Program r = trace(
        [](const std::vector<Array>& x) {
          Array a = x[0] * x[1] + 1.0f;
          return std::vector<Array>{a * a - x[0], tanh(a) + x[2]};
        },
        {{f32, {big}}, {f32, {}}, {f32, {big}}});
    check_fused(r, {random_array({big}, f32), random_array({}, f32), random_array({big}, f32)});
  }
  // Unit-stride inputs of two dtypes in one kernel (CPU-type devices then read
  // them without texel views, which take one format per kernel).
  const Program m = trace(
      [](const std::vector<Array>& x) {
        return std::vector<Array>{astype(x[0], f32) * x[1] + 1.0f, x[0] + x[0]};
      },
      {{i32, {4096}}, {f32, {4096}}});
  check_fused(m, {random_array({4096}, i32), random_array({4096}, f32)});
}

TEST_CASE("a kernel with more operands than one dispatch binds is still correct") {
  std::vector<Aval> avals(40, Aval{f32, {300}});
  const Program p = trace(
      [](const std::vector<Array>& x) {
        Array acc = x[0];
        for (std::size_t i = 1; i < x.size(); ++i) acc = acc * 0.5f + x[i];
        return std::vector<Array>{acc};
      },
      avals);
  std::vector<Array> in;
  for (std::size_t i = 0; i < avals.size(); ++i) in.push_back(random_array({300}, f32));
  const auto steps = check_fused(p, in);
  CHECK(steps.size() == 1);
}

#if KILN_HAVE_VULKAN
TEST_CASE("a fused body compiles one Vulkan pipeline, reused for other sizes") {
  if (!on_vulkan()) return;
  auto& cache = vk::Context::get(dev().index).pipelines();
  const auto body = [](const std::vector<Array>& x) {
    return std::vector<Array>{sigmoid(x[0] * 3.0f - 0.25f) + x[0]};
  };
  const Program p = trace(body, {{f32, {4096}}});
  check_fused(p, {random_array({4096}, f32)});
  const auto before = cache.stats();
  const Program q = trace(body, {{f32, {8192}}});
  check_fused(q, {random_array({8192}, f32)});  // the eager ops hit the cache too
  CHECK(cache.stats().pipelines == before.pipelines);
}
#endif

TEST_CASE("Executable: fused and unfused runs agree, with fewer launches fused") {
  const auto mlp = [](const std::vector<Array>& x) {
    Array h = relu(matmul(x[0], x[1]) + x[2]);
    Array logits = matmul(h, x[3]) + x[4];
    Array shifted = logits - max(logits, 1, true);
    Array lse = log(sum(exp(shifted), 1, true));
    Array loss = mean(-sum((shifted - lse) * x[5], 1));
    return std::vector<Array>{loss, shifted - lse, h};
  };
  const std::vector<Aval> avals = {{f32, {64, 32}}, {f32, {32, 128}}, {f32, {128}},
                                   {f32, {128, 10}}, {f32, {10}}, {f32, {64, 10}}};
  const Program p = trace(mlp, avals);
  std::vector<HostData> data;
  for (const Aval& a : avals) data.push_back(host_random(a.shape, a.dtype));
  const auto inputs = [&] {
    std::vector<Array> in;
    for (const HostData& d : data) in.push_back(on_device(d));
    return in;
  };
  Executable fused(p, dev(), "mlp", FusionOptions{true});
  Executable unfused(p, dev(), "mlp", FusionOptions{false});
  RunStats fs, us;
  std::vector<Array> in_f = inputs(), in_u = inputs();
  const std::vector<Array> out_f = fused.run(in_f, &fs);
  const std::vector<Array> out_u = unfused.run(in_u, &us);
  REQUIRE(out_f.size() == 3);
  for (std::size_t i = 0; i < out_f.size(); ++i) check_equal(out_f[i], out_u[i]);
  MESSAGE("mlp launches: unfused ", us.launches, ", fused ", fs.launches);
  CHECK(us.launches == p.equations.size());
  CHECK(fs.launches < us.launches);
  CHECK(fs.launches == fused.steps().size());
}

TEST_CASE("Executable: a dead input's buffer receives a fused output in place") {
  const Program p = trace(
      [](const std::vector<Array>& x) {
        return std::vector<Array>{tanh(x[0] * 0.5f) * x[1] + x[0]};
      },
      {{f32, {5000}}, {f32, {5000}}});
  const HostData h0 = host_random({5000}, f32), h1 = host_random({5000}, f32);
  const std::vector<Array> want = eval(p, std::vector<Array>{on_device(h0), on_device(h1)});
  Executable e(p, dev(), "inplace");
  std::vector<Array> in;
  in.push_back(on_device(h0));
  in.push_back(on_device(h1));
  const Buffer* x0 = in[0].buffer().get();
  RunStats stats;
  const std::vector<Array> out = e.run(in, &stats);
  CHECK(stats.launches == 1);
  CHECK(stats.reused_in_place == 1);
  CHECK(out[0].buffer().get() == x0);
  check_equal(out[0], want[0]);
}

TEST_CASE("threefry random bits fuse and equal the unfused values") {
  const Program p = trace(
      [](const std::vector<Array>& x) {
        return std::vector<Array>{random::uniform(x[0], {3, 5000}),
                                  random::normal(x[0], {7})};
      },
      {{u32, {2}}});
  const Array key = to_device(random::key(7), dev());
  const std::vector<Step> steps = check_fused(p, {key});
  std::size_t biggest = 0;
  for (const Step& s : steps) {
    if (s.kernel != nullptr) biggest = std::max(biggest, s.kernel->body.equations.size());
  }
  MESSAGE("threefry: ", p.equations.size(), " equations, ", steps.size(), " steps, ",
          fused_steps(steps), " fused, largest body ", biggest, " equations");
  CHECK(steps.size() < p.equations.size() / 4);
  CHECK(biggest >= 50);
}

TEST_CASE("matmul epilogues: bias, activation, a residual; the product read outside too") {
  const Program p = trace(
      [](const std::vector<Array>& x) {
        Array m = matmul(x[0], x[1]);
        Array h = relu(m + x[2]) * 0.5f + x[3];
        return std::vector<Array>{h, sum(m)};
      },
      {{f32, {2, 33, 17}}, {f32, {17, 40}}, {f32, {40}}, {f32, {2, 33, 40}}});
  const auto steps = check_fused(
      p, {random_array({2, 33, 17}, f32), random_array({17, 40}, f32), random_array({40}, f32),
          random_array({2, 33, 40}, f32)});
  REQUIRE(steps.size() == 2);  // fused(matmul ...) then sum(m)
  REQUIRE(steps[0].kernel != nullptr);
  CHECK(steps[0].kernel->kind == FusedKernel::Kind::kMatmulEpilogue);
  CHECK(steps[0].outputs.size() == 2);  // m (read by sum) and h
  CHECK(to_string(p, steps).find("matmul_epilogue") != std::string::npos);
  // Batched operands on both sides, a column broadcast, a bool output.
  const Program q = trace(
      [](const std::vector<Array>& x) {
        Array y = matmul(x[0], x[1]) * x[2] + 7.0f;
        return std::vector<Array>{y, y > 7.0f};
      },
      {{f32, {3, 5, 9}}, {f32, {3, 9, 6}}, {f32, {5, 1}}});
  const auto qs = check_fused(q, {random_array({3, 5, 9}, f32), random_array({3, 9, 6}, f32),
                                  random_array({5, 1}, f32)});
  CHECK(qs.size() == 1);
}

TEST_CASE("matmul epilogues on products big enough for the widest register tiles") {
  // From 256^3 multiply-adds CPU-type devices take 8 x 16 register tiles; the
  // epilogue stores element by element through the group. Ragged M and N, a
  // bias row, a residual; the product itself is an output too.
  const Program p = trace(
      [](const std::vector<Array>& x) {
        Array m = matmul(x[0], x[1]);
        Array h = relu(m + x[2]) + x[3];
        return std::vector<Array>{h, m};
      },
      {{f32, {2, 150, 264}}, {f32, {264, 232}}, {f32, {232}}, {f32, {2, 150, 232}}});
  const auto steps = check_fused(
      p, {random_array({2, 150, 264}, f32), random_array({264, 232}, f32),
          random_array({232}, f32), random_array({2, 150, 232}, f32)});
  REQUIRE(steps.size() == 1);
  CHECK(steps[0].kernel->kind == FusedKernel::Kind::kMatmulEpilogue);
}

TEST_CASE("matmul epilogue not fused when the product is read before the group runs") {
  const Program p = trace(
      [](const std::vector<Array>& x) {
        Array m = matmul(x[0], x[1]);
        Array s = sum(m, 1, true);  // reads m before the group's last member
        return std::vector<Array>{(m + 1.0f) * s};
      },
      {{f32, {8, 4}}, {f32, {4, 6}}});
  const auto steps = check_fused(p, {random_array({8, 4}, f32), random_array({4, 6}, f32)});
  REQUIRE(steps.size() == 3);
  CHECK(steps[0].equation->prim == Prim::kMatmul);
  CHECK(steps[2].kernel->kind == FusedKernel::Kind::kElementwise);
}

TEST_CASE("reduction prologues: sum, max and min of fused values, with escaping values") {
  for (const Shape& s : {Shape{5, 7}, Shape{64, 1000}, Shape{3, 700, 4}, Shape{9000}}) {
    CAPTURE(to_string(s));
    const Program p = trace(
        [](const std::vector<Array>& x) {
          const std::int64_t last = x[0].ndim() - 1;
          Array shifted = x[0] - stop_gradient(max(x[0], last, true));
          Array e = exp(shifted);
          Array total = sum(e, last, true);  // prologue: shifted, e escape
          Array sq = sum(x[0] * x[0]);       // over every axis
          Array lo = min(abs(x[0]) + 1.0f, 0);
          return std::vector<Array>{e / total, shifted, sq, lo};
        },
        {{f32, s}});
    const auto steps = check_fused(p, {random_array(s, f32)});
    std::size_t prologues = 0;
    for (const Step& st : steps) {
      prologues += st.kernel != nullptr && st.kernel->kind == FusedKernel::Kind::kReducePrologue;
    }
    CHECK(prologues == 3);
  }
  // i32 sums wrap; bool values feed a max.
  const Program q = trace(
      [](const std::vector<Array>& x) {
        return std::vector<Array>{sum(x[0] * x[0], 1), max(x[0] > 0, 0)};
      },
      {{i32, {40, 300}}});
  check_fused(q, {random_array({40, 300}, i32)});
}

TEST_CASE("reduction prologue of f16 values") {
  if (!has_f16()) return;
  const Program p = trace(
      [](const std::vector<Array>& x) {
        Array h = astype(x[0], f16);
        return std::vector<Array>{sum(h * h, 1), max(h, 0)};
      },
      {{f32, {30, 600}}});
  check_fused(p, {random_array({30, 600}, f32)});
}

TEST_CASE("anchored kernels on empty shapes and an empty contraction") {
  // matmul over k == 0 is zeros; its epilogue still runs.
  const Program p = trace(
      [](const std::vector<Array>& x) {
        return std::vector<Array>{relu(matmul(x[0], x[1]) + x[2])};
      },
      {{f32, {3, 0}}, {f32, {0, 4}}, {f32, {4}}});
  const auto ps = check_fused(p, {random_array({3, 0}, f32), random_array({0, 4}, f32),
                                  random_array({4}, f32)});
  CHECK(ps.size() == 1);
  // A sum over an empty axis is zeros; a max over an empty output is empty.
  const Program q = trace(
      [](const std::vector<Array>& x) {
        return std::vector<Array>{sum(exp(x[0]), 0), max(x[0] * 2.0f, 1)};
      },
      {{f32, {0, 6}}});
  const auto qs = check_fused(q, {random_array({0, 6}, f32)});
  CHECK(qs.size() == 2);
  // An empty epilogue.
  const Program r = trace(
      [](const std::vector<Array>& x) {
        return std::vector<Array>{matmul(x[0], x[1]) * 2.0f};
      },
      {{f32, {0, 5}}, {f32, {5, 4}}});
  check_fused(r, {random_array({0, 5}, f32), random_array({5, 4}, f32)});
}

TEST_CASE("Executable: epilogue and prologue kernels run in place where they may") {
  // The CPU writes an epilogue's output into a dying input after the matmul
  // finished, and a prologue's escaping values like an elementwise kernel's;
  // Vulkan declines both (its matmul reads the operands while epilogues store).
  const auto run = [](const Program& p, const std::vector<HostData>& h,
                      FusedKernel::Kind kind) {
    std::vector<Array> ref, in;
    for (const HostData& d : h) ref.push_back(on_device(d));
    for (const HostData& d : h) in.push_back(on_device(d));
    const std::vector<Array> want = eval(p, ref);
    Executable e(p, dev(), "in place");
    REQUIRE(e.steps().size() == 1);
    REQUIRE(e.steps()[0].kernel != nullptr);
    CHECK(e.steps()[0].kernel->kind == kind);
    const Buffer* x0 = in[0].buffer().get();
    RunStats stats;
    const std::vector<Array> out = e.run(in, &stats);
    for (std::size_t i = 0; i < out.size(); ++i) check_equal(out[i], want[i]);
    CHECK(stats.launches == 1);
    CHECK(stats.reused_in_place == (on_vulkan() ? 0u : 1u));
    CHECK((out[0].buffer().get() == x0) == !on_vulkan());
  };
  // h = relu(x @ w + b) + x: a residual with x's aval, x dies in the kernel.
  run(trace(
          [](const std::vector<Array>& x) {
            return std::vector<Array>{relu(matmul(x[0], x[1]) + x[2]) + x[0]};
          },
          {{f32, {64, 64}}, {f32, {64, 64}}, {f32, {64}}}),
      {host_random({64, 64}, f32), host_random({64, 64}, f32), host_random({64}, f32)},
      FusedKernel::Kind::kMatmulEpilogue);
  // y = x * 2 + 1 escapes next to sum(y * y, 1).
  run(trace(
          [](const std::vector<Array>& x) {
            Array y = x[0] * 2.0f + 1.0f;
            return std::vector<Array>{y, sum(y * y, 1)};
          },
          {{f32, {300, 70}}}),
      {host_random({300, 70}, f32)}, FusedKernel::Kind::kReducePrologue);
}

TEST_CASE("long broadcast rows: bias rows and per-row scalars, in place too") {
  // Rows >= 512 elements are walked row by row on the CPU (inputs read in place);
  // rows longer than a chunk, rows that are no multiple of the SIMD width (no
  // transcendental ops then) and ones that are (with exp).
  for (const Shape& s : {Shape{3, 4099}, Shape{2, 9000}, Shape{4, 1024}, Shape{2, 2, 600}}) {
    CAPTURE(to_string(s));
    const Shape row{s.back()};
    Shape col = s;
    col.back() = 1;
    const bool aligned = s.back() % 16 == 0;
    const Program p = trace(
        [aligned](const std::vector<Array>& x) {
          Array a = x[0] * x[1] - x[2];
          Array b = where(a > x[2], a, x[1] / (abs(a) + 1.0f));
          if (aligned) b = exp(-abs(b)) + b;
          return std::vector<Array>{b, maximum(b, x[0]) > 0.5f};
        },
        {{f32, s}, {f32, row}, {f32, col}});
    const HostData h0 = host_random(s, f32), h1 = host_random(row, f32),
                   h2 = host_random(col, f32);
    const auto steps =
        check_fused(p, {on_device(h0), on_device(h1), on_device(h2)});
    REQUIRE(steps.size() == 1);
    // out0 into x0's buffer.
    const Array x0 = on_device(h0);
    const std::vector<Array> want = eval(p, std::vector<Array>{on_device(h0), on_device(h1),
                                                               on_device(h2)});
    std::vector<Array> env(p.num_values());
    env[p.inputs[0]] = x0;
    env[p.inputs[1]] = on_device(h1);
    env[p.inputs[2]] = on_device(h2);
    for (std::size_t i = 0; i < p.constants.size(); ++i) env[p.constants[i]] = p.constant_values[i];
    std::vector<Array> args;
    for (ValueId v : steps[0].inputs) args.push_back(env[v]);
    const std::vector<std::shared_ptr<Buffer>> into = {x0.buffer(), nullptr};
    const auto bufs = backend_for(dev()).eval_fused(*steps[0].kernel, args, into);
    CHECK(bufs[0] == x0.buffer());
    check_equal(Array(f32, s, bufs[0]), want[0]);
    check_equal(Array(bool_, s, bufs[1]), want[1]);
  }
}

namespace {

// f32 values with IEEE edge cases every few elements (NaN, signed zeros,
// infinities, a subnormal), so tails and full vectors both meet them.
HostData host_special(const Shape& shape, std::size_t phase) {
  HostData h = host_random(shape, f32);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                            -0.0f,
                            0.0f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            1e-40f,
                            -std::numeric_limits<float>::quiet_NaN(),
                            1.0f};
  const std::size_t n = h.bytes.size() / 4;
  for (std::size_t i = phase % 5; i < n; i += 5) {
    std::memcpy(&h.bytes[i * 4], &specials[(i / 5 + phase) % std::size(specials)], 4);
  }
  return h;
}

// Bodies of every op the CPU code generator covers (backends/cpu/jit.hpp),
// each fused kernel with at most 10 runs of operands and outputs.
std::vector<Array> jit_arith(const std::vector<Array>& x) {
  // x0, x1: runs; x2: a scalar; x3: broadcast (a bias row or a per-row scalar)
  return {x[0] + x[1], x[0] - x[2], x[0] * x[3], x[1] / x[0],
          -sqrt(abs(x[0] * x[1])) + rsqrt(x[1])};
}
std::vector<Array> jit_minmax(const std::vector<Array>& x) {
  return {maximum(x[0], x[1]), minimum(x[1], x[0]), relu(x[0]) + maximum(x[2], x[1]),
          minimum(x[3], -x[0])};
}
std::vector<Array> jit_logic(const std::vector<Array>& x) {
  Array lt = x[0] < x[1], ge = x[0] >= x[3];
  Array eq = x[0] == x[1], ne = x[1] != x[2];
  Array both = logical_and(lt, logical_not(eq));
  Array any = logical_or(x[0] > x[2], x[0] <= x[1]);
  return {where(both, x[0], x[1] * x[2]), where(ne, x[3], x[0]), any,
          where(ge, logical_not(any), both), logical_or(ne, stop_gradient(eq))};
}

// Calls (exp, log, tanh, sigmoid; i32 arithmetic, astype) with values, bools
// and broadcast operands live across them: the spills around a call.
std::vector<Array> jit_calls(const std::vector<Array>& x) {
  Array a = x[0] * x[3], b = x[1] - x[2], m = x[0] < x[1];
  Array e = exp(a), l = log(abs(b) + x[2]);
  Array t = tanh(e - l) + sigmoid(a * b);
  return {t * a + b, where(m, l, e), t - exp(x[2] + x[3])};
}
std::vector<Array> jit_convert(const std::vector<Array>& x) {
  Array m = x[0] < x[1];
  Array i = astype(x[0] * 100.0f, i32) * astype(m, i32) + astype(x[1], i32);
  Array u = astype(x[3], u32) + astype(x[0], u32);
  return {astype(i, f32) + astype(logical_or(m, x[0] > x[3]), f32), astype(u, f32),
          astype(i - astype(x[2], i32), bool_)};
}

}  // namespace

TEST_CASE("CPU generated code: each op bit for bit at every tail length, with edge values") {
  if (dev().kind != Device::Kind::kCpu) return;
  const bool jit = cpu::jit_available();
  using Body = std::vector<Array> (*)(const std::vector<Array>&);
  const Body bodies[] = {jit_arith, jit_minmax, jit_logic, jit_calls, jit_convert};
  std::vector<std::int64_t> lengths;
  for (std::int64_t n = 1; n <= 70; ++n) lengths.push_back(n);
  lengths.push_back(4099);
  for (std::size_t k = 0; k < std::size(bodies); ++k) {
    for (std::int64_t n : lengths) {
      // [n] with a [1] x3, [3, n] with a per-row x3 (gathered when rows are short)
      for (const bool rows : {false, true}) {
        CAPTURE(k);
        CAPTURE(n);
        CAPTURE(rows);
        const Shape s = rows ? Shape{3, n} : Shape{n};
        const Shape s3 = rows ? Shape{3, 1} : Shape{1};
        const Program p = trace(bodies[k], {{f32, s}, {f32, s}, {f32, {}}, {f32, s3}});
        const std::size_t before = cpu::jit_bodies_compiled();
        const auto steps =
            check_fused(p, {on_device(host_special(s, 0)), on_device(host_special(s, 2)),
                            on_device(host_special({}, 3)), on_device(host_special(s3, 1))});
        CHECK(fused_steps(steps) >= 1);
        // (one element in all: every equation runs on scalars, no block code)
        if (jit && numel(s) > 1) CHECK(cpu::jit_bodies_compiled() > before);
      }
    }
  }
  if (jit) {
    MESSAGE("code generation: " << cpu::jit_generate_ms_total() / double(cpu::jit_bodies_compiled())
                                << " ms per body");
  }
}

TEST_CASE("CPU generated code writes outputs over its inputs in place") {
  if (dev().kind != Device::Kind::kCpu) return;
  for (std::int64_t n : {std::int64_t{1}, std::int64_t{15}, std::int64_t{17}, std::int64_t{70},
                         std::int64_t{4099}}) {
    CAPTURE(n);
    const Program p = trace(
        [](const std::vector<Array>& x) {
          Array a = maximum(x[1] * 2.0f, x[0]) + x[2];
          Array b = where(x[0] > a, x[1] - x[0], a / x[0]);
          return std::vector<Array>{a, b};
        },
        {{f32, {n}}, {f32, {n}}, {f32, {}}});
    const std::vector<Step> steps = fuse(p);
    REQUIRE(steps.size() == 1);
    const HostData h0 = host_special({n}, 0), h1 = host_special({n}, 3);
    const Array s0 = random_array({}, f32);
    const std::vector<Array> want = eval(p, std::vector<Array>{on_device(h0), on_device(h1), s0});
    const Array x0 = on_device(h0), x1 = on_device(h1);
    std::vector<Array> args = step_args(p, steps[0], {x0, x1, s0});
    // a over x1 (read again by b), b over x0.
    const std::vector<std::shared_ptr<Buffer>> into = {x1.buffer(), x0.buffer()};
    const std::size_t before = cpu::jit_bodies_compiled();
    const auto bufs = backend_for(dev()).eval_fused(*steps[0].kernel, args, into);
    if (cpu::jit_available() && n > 1) CHECK(cpu::jit_bodies_compiled() > before);
    check_equal(Array(f32, {n}, bufs[0]), want[0]);
    check_equal(Array(f32, {n}, bufs[1]), want[1]);
  }
}

TEST_CASE("CPU generated code holding 24 broadcast operands (zmm16 and up on AVX-512)") {
  if (dev().kind != Device::Kind::kCpu) return;
  std::vector<Aval> avals(25, Aval{f32, Shape{}});
  avals[0].shape = {3, 45};
  const Program p = trace(
      [](const std::vector<Array>& x) {
        Array acc = x[0];
        for (std::size_t i = 1; i < x.size(); ++i) acc = maximum(acc * x[i], x[0] - x[i]);
        return std::vector<Array>{acc};
      },
      avals);
  std::vector<Array> in{on_device(host_special({3, 45}, 0))};
  for (std::size_t i = 1; i < avals.size(); ++i) in.push_back(on_device(host_special({}, i)));
  const std::size_t before = cpu::jit_bodies_compiled();
  CHECK(fused_steps(check_fused(p, in)) == 1);
  // AVX2 has 14 vector registers for values: the body is refused there.
  if (cpu::jit_available() && cpu::active_isa() == cpu::Isa::kX86V4) {
    CHECK(cpu::jit_bodies_compiled() > before);
  }
}

TEST_CASE("CPU bodies the code generator refuses run on the flat kernels") {
  if (dev().kind != Device::Kind::kCpu) return;
  const Shape s{2, 37};
  // pow has neither code of its own nor a SIMD kernel to call (the C
  // library's, element by element: backends/cpu/float_ops.hpp); 12 outputs
  // and 2 runs exceed the 10 pointer registers; 40 broadcast operands held for
  // the call exceed the vector ones.
  const Program with_pow =
      trace([](const std::vector<Array>& x) { return std::vector<Array>{power(x[0], x[1]) * x[1] + 1.0f}; },
            {{f32, s}, {f32, s}});
  const Program many_outputs = trace(
      [](const std::vector<Array>& x) {
        std::vector<Array> outs{x[0] * x[1]};  // a chain: one kernel
        for (int i = 1; i < 12; ++i) outs.push_back(outs.back() * 0.5f + x[1]);
        return outs;
      },
      {{f32, s}, {f32, s}});
  std::vector<Aval> avals(41, Aval{f32, Shape{}});
  avals[0].shape = s;
  const Program many_scalars = trace(
      [](const std::vector<Array>& x) {
        Array acc = x[0];
        for (std::size_t i = 1; i < x.size(); ++i) acc = acc * x[i] + x[0];
        return std::vector<Array>{acc};
      },
      avals);
  std::vector<Array> scalars{random_array(s, f32)};
  for (int i = 0; i < 40; ++i) scalars.push_back(random_array({}, f32, 0.5, 1.5));
  const std::size_t before = cpu::jit_bodies_compiled();
  const std::vector<Array> two{random_array(s, f32), random_array(s, f32)};
  CHECK(fused_steps(check_fused(with_pow, two)) == 1);
  CHECK(fused_steps(check_fused(many_outputs, two)) == 1);
  CHECK(fused_steps(check_fused(many_scalars, scalars)) == 1);
  CHECK(cpu::jit_bodies_compiled() == before);
}

TEST_CASE("KILN_CPU_JIT=0: the same bodies run on the flat kernels") {
  if (dev().kind != Device::Kind::kCpu) return;
  ::setenv("KILN_CPU_JIT", "0", 1);
  CHECK_FALSE(cpu::jit_available());
  const std::size_t before = cpu::jit_bodies_compiled();
  for (std::int64_t n : {std::int64_t{37}, std::int64_t{4099}}) {
    for (const auto body : {jit_logic, jit_calls, jit_convert}) {
      const Program p = trace(body, {{f32, {n}}, {f32, {n}}, {f32, {}}, {f32, {1}}});
      check_fused(p, {on_device(host_special({n}, 0)), on_device(host_special({n}, 2)),
                      on_device(host_special({}, 3)), on_device(host_special({1}, 1))});
    }
  }
  CHECK(cpu::jit_bodies_compiled() == before);
  ::unsetenv("KILN_CPU_JIT");
}
