// A convolution's implicit-GEMM kernels (dsl/fusion.hpp: kUnfoldMatmul,
// kMatmulFold) on the device KILN_DEVICE names: which equations fuse() takes
// into them and which it leaves alone, every conv flavour's forward and
// gradients jitted with them equal to the same program without them (bit for
// bit, on new inputs too), and a CNN training program in which every fused
// kernel kind (all FusedKernel::kNumKinds of them) appears and runs bit for bit
// against its equations evaluated one at a time.
#include <doctest/doctest.h>

#include <array>
#include <cstring>
#include <functional>
#include <kiln/dsl/backend.hpp>
#include <kiln/dsl/fusion.hpp>
#include <kiln/dsl/program.hpp>
#include <kiln/dsl/trace.hpp>
#include <kiln/kiln.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "fusion_util.hpp"

using namespace kiln;
using kiln::fusion_test::bytes_of;
using kiln::fusion_test::check_fused;
using kiln::fusion_test::trace;

namespace {

Device dev() { return default_device(); }
bool on_cpu() { return dev().kind == Device::Kind::kCpu; }

// Deterministic values in [-1, 1) of `dtype` on the device.
Array values(const Shape& shape, DType dtype, std::uint32_t seed) {
  return astype(random::uniform(random::key(seed), shape, f32, -1.0, 1.0), dtype);
}

bool supports(DType dtype) {
  try {
    (void)values({1}, dtype, 0);
    return true;
  } catch (const DTypeError&) {
    return false;
  }
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

using Conv = std::function<Array(const Array&, const Array&)>;

struct ConvCase {
  const char* name;
  Shape x, w;
  Conv conv;
};

std::vector<ConvCase> conv_cases() {
  return {
      {"conv2d 3x3, padding 1", {3, 4, 9, 7}, {6, 4, 3, 3},
       [](const Array& x, const Array& w) { return nn::conv2d(x, w, {.padding = 1}); }},
      {"conv2d stride (2, 1), asymmetric padding, 3x2", {2, 3, 9, 8}, {5, 3, 3, 2},
       [](const Array& x, const Array& w) {
         return nn::conv2d(x, w, {.stride = {2, 1}, .padding = nn::Padding2({0, 1}, {1, 0})});
       }},
      {"conv2d dilation 2, groups 2", {2, 4, 10, 9}, {6, 2, 3, 3},
       [](const Array& x, const Array& w) {
         return nn::conv2d(x, w, {.padding = 2, .dilation = 2, .groups = 2});
       }},
      {"conv2d 1x1, one image", {1, 5, 6, 6}, {7, 5, 1, 1},
       [](const Array& x, const Array& w) { return nn::conv2d(x, w); }},
      {"conv3d", {2, 2, 5, 4, 6}, {3, 2, 2, 3, 2},
       [](const Array& x, const Array& w) { return nn::conv3d(x, w, {.padding = 1}); }},
      {"conv_transpose2d stride 2", {2, 4, 5, 6}, {3, 4, 3, 3},
       [](const Array& x, const Array& w) {
         return nn::conv_transpose2d(x, w, {.stride = 2, .padding = 1, .output_padding = 1});
       }},
  };
}

// (loss, dx, dw, y) of loss = sum(conv(x, w) * r), y = conv(x, w).
auto conv_step(Conv conv) {
  return [conv](const std::vector<Array>& xw, const Array& r) {
    auto loss = [&](const std::vector<Array>& p, const Array& rr) {
      return sum(conv(p[0], p[1]) * rr);
    };
    auto [l, g] = value_and_grad(loss)(xw, r);
    return std::tuple{l, g[0], g[1], conv(xw[0], xw[1])};
  };
}

}  // namespace

TEST_CASE("implicit GEMM: every conv's forward and gradients equal the unfused program") {
  const std::vector<ConvCase> cases = conv_cases();
  for (const ConvCase& c : cases) {
    for (DType dtype : {f32, f64, f16, bf16}) {
      if (!supports(dtype)) continue;
      // Elsewhere fusion leaves the kinds out (both programs are the same):
      // one case shows it.
      if (!on_cpu() && (dtype != f32 || &c != &cases.front())) continue;
      CAPTURE(c.name);
      CAPTURE(name(dtype));
      const Shape y_shape = c.conv(values(c.x, f32, 0), values(c.w, f32, 0)).shape();
      FusionOptions without;
      without.windows = false;
      auto fused = filter_jit(conv_step(c.conv), {.name = "conv"});
      auto plain = filter_jit(conv_step(c.conv), {.name = "conv", .fusion = without});
      for (std::uint32_t seed : {1u, 7u}) {  // the second call runs the kept plans
        const std::vector<Array> xw = {values(c.x, dtype, seed), values(c.w, dtype, seed + 1)};
        const Array r = values(y_shape, dtype, seed + 2);
        const auto got = fused(xw, r);
        const auto want = plain(xw, r);
        CHECK(bytes_of(std::get<0>(got)) == bytes_of(std::get<0>(want)));
        CHECK(bytes_of(std::get<1>(got)) == bytes_of(std::get<1>(want)));
        CHECK(bytes_of(std::get<2>(got)) == bytes_of(std::get<2>(want)));
        CHECK(bytes_of(std::get<3>(got)) == bytes_of(std::get<3>(want)));
      }
      const std::string text = fused.compiled_text();
      CAPTURE(text);
      if (on_cpu()) {
        // The forward product or the input gradient, and the weight gradient.
        CHECK(count(text, "unfold_matmul]") + count(text, "matmul_fold]") >= 3);
        CHECK(count(text, "matmul_fold]") >= 1);
        CHECK(count(text, "unfold_matmul]") >= 1);
      } else {  // no Vulkan kernels for them: the equations stay separate launches
        CHECK(count(text, "unfold_matmul]") + count(text, "matmul_fold]") == 0);
      }
      CHECK(count(plain.compiled_text(), "unfold_matmul]") == 0);
      CHECK(count(plain.compiled_text(), "matmul_fold]") == 0);
    }
  }
}

namespace {

std::size_t kinds(const std::vector<Step>& steps, FusedKernel::Kind kind) {
  std::size_t n = 0;
  for (const Step& s : steps) n += s.kernel != nullptr && s.kernel->kind == kind;
  return n;
}

const Equation* single(const std::vector<Step>& steps, Prim prim) {
  for (const Step& s : steps) {
    if (s.equation != nullptr && s.equation->prim == prim) return s.equation;
  }
  return nullptr;
}

const Window kWindow{.size = {3, 3}, .padding = {{1, 1}, {1, 1}}};

}  // namespace

TEST_CASE("fuse: an unfold goes into matmuls only when matmuls are all that read it") {
  const std::vector<Aval> avals = {{f32, {2, 3, 6, 6}}, {f32, {4, 27}}};
  const auto conv = [](const Array& x, const Array& w) {
    return matmul(w, reshape(unfold(x, kWindow), {2, 27, 36}));
  };
  // Read by two matmuls (a forward product and a weight gradient): copied
  // into both kernels, no unfold step left.
  const Program both = trace(
      [&](const std::vector<Array>& x) {
        const Array cols = reshape(unfold(x[0], kWindow), {2, 27, 36});
        return std::vector<Array>{matmul(x[1], cols), matmul(x[1] * 2.0f, cols)};
      },
      avals);
  const std::vector<Step> steps = fuse(both);
  CHECK(kinds(steps, FusedKernel::Kind::kUnfoldMatmul) == 2);
  CHECK(single(steps, Prim::kUnfold) == nullptr);
  // Also read by a reduction (a pool): the columns are made once, as before.
  const Program pooled = trace(
      [&](const std::vector<Array>& x) {
        return std::vector<Array>{conv(x[0], x[1]), max(unfold(x[0], kWindow), Axes{2})};
      },
      avals);
  const std::vector<Step> pooled_steps = fuse(pooled);
  CHECK(kinds(pooled_steps, FusedKernel::Kind::kUnfoldMatmul) == 0);
  CHECK(single(pooled_steps, Prim::kUnfold) != nullptr);
  // Returned: kept.
  const Program returned = trace(
      [&](const std::vector<Array>& x) {
        const Array cols = unfold(x[0], kWindow);
        return std::vector<Array>{matmul(x[1], reshape(cols, {2, 27, 36})), cols};
      },
      avals);
  CHECK(kinds(fuse(returned), FusedKernel::Kind::kUnfoldMatmul) == 0);
  // Off in the options (KILN_FUSION=anchors), and with fusion off.
  const Program plain = trace(
      [&](const std::vector<Array>& x) { return std::vector<Array>{conv(x[0], x[1])}; }, avals);
  FusionOptions without;
  without.windows = false;
  CHECK(kinds(fuse(plain), FusedKernel::Kind::kUnfoldMatmul) == 1);
  CHECK(kinds(fuse(plain, without), FusedKernel::Kind::kUnfoldMatmul) == 0);
  CHECK(kinds(fuse(plain, FusionOptions{false}), FusedKernel::Kind::kUnfoldMatmul) == 0);
  CHECK(to_string(plain, fuse(plain)).find("unfold_matmul] {") != std::string::npos);
}

TEST_CASE("fuse: a matmul goes into a fold only when the fold is all that reads it") {
  const std::vector<Aval> avals = {{f32, {27, 4}}, {f32, {2, 4, 36}}};
  const auto dcols = [](const std::vector<Array>& x) {
    return reshape(matmul(x[0], x[1]), {2, 3, 9, 36});
  };
  const Program alone = trace(
      [&](const std::vector<Array>& x) {
        return std::vector<Array>{fold(dcols(x), {6, 6}, kWindow)};
      },
      avals);
  const std::vector<Step> steps = fuse(alone);
  REQUIRE(steps.size() == 1);
  CHECK(kinds(steps, FusedKernel::Kind::kMatmulFold) == 1);
  const Program shared = trace(
      [&](const std::vector<Array>& x) {
        const Array d = dcols(x);
        return std::vector<Array>{fold(d, {6, 6}, kWindow), sum(d)};
      },
      avals);
  const std::vector<Step> shared_steps = fuse(shared);
  CHECK(kinds(shared_steps, FusedKernel::Kind::kMatmulFold) == 0);
  CHECK(single(shared_steps, Prim::kFold) != nullptr);
}

TEST_CASE("every fused kernel kind appears in a CNN training program and runs bit for bit") {
  // conv -> bias -> relu -> max pool -> linear -> softmax cross-entropy, and
  // its gradient with respect to every parameter and the input.
  const std::vector<Aval> avals = {{f32, {3, 2, 8, 8}}, {f32, {4, 2, 3, 3}}, {f32, {4, 1, 1}},
                                   {f32, {64, 5}},      {f32, {5}},          {i32, {3}}};
  const Program p = trace(
      [](const std::vector<Array>& x) {
        auto loss = [](const std::vector<Array>& q, const Array& labels) {
          Array h = nn::max_pool2d(relu(nn::conv2d(q[0], q[1], {.padding = 1}) + q[2]), 2,
                                   {.stride = 2});
          h = matmul(reshape(h, {3, 64}), q[3]) + q[4];
          return nn::softmax_cross_entropy_with_integer_labels(h, labels);
        };
        auto [l, g] = value_and_grad(loss)(
            std::vector<Array>{x[0], x[1], x[2], x[3], x[4]}, x[5]);
        std::vector<Array> outs = {l};
        outs.insert(outs.end(), g.begin(), g.end());
        return outs;
      },
      avals);
  std::vector<Array> inputs;
  for (std::size_t i = 0; i + 1 < avals.size(); ++i) {
    inputs.push_back(values(avals[i].shape, f32, static_cast<std::uint32_t>(i)));
  }
  inputs.push_back(to_device(array<std::int32_t>({1, 4, 0}, {3}), dev()));
  const std::vector<Step> steps = check_fused(p, inputs);
  std::array<std::size_t, FusedKernel::kNumKinds> seen{};
  for (const Step& s : steps) {
    if (s.kernel != nullptr) ++seen[static_cast<std::size_t>(s.kernel->kind)];
  }
  for (int k = 0; k < FusedKernel::kNumKinds; ++k) {
    CAPTURE(name(static_cast<FusedKernel::Kind>(k)));
    CHECK(seen[static_cast<std::size_t>(k)] > 0);
  }
}

TEST_CASE("implicit GEMM with the batch folded into rows, and its fallbacks, give eager's bits") {
  // A shared right operand folds the batch into one product's rows
  // (matmul.cpp): the implicit kernels split it per image where kiln's f32
  // GEMM gives the same bits, and elsewhere (f64), like columns broadcast over
  // the batch, run their equations one at a time. All of them form (fusion
  // does not look at dtypes or batches) and give the values of eager and of
  // the program without them.
  struct Case {
    const char* name;
    std::vector<Shape> shapes;
    std::function<Array(const std::vector<Array>&)> f;
  };
  const std::vector<Case> cases = {
      {"one image's columns, broadcast over a batch of weights",
       {{1, 3, 6, 6}, {2, 4, 27}},
       [](const std::vector<Array>& x) {
         return matmul(x[1], reshape(unfold(x[0], kWindow), {27, 36}));
       }},
      {"batched columns times a shared right operand",
       {{2, 3, 6, 6}, {36, 5}},
       [](const std::vector<Array>& x) {
         return matmul(reshape(unfold(x[0], kWindow), {2, 27, 36}), x[1]);
       }},
      {"a batched left operand times a shared right one, folded",
       {{2, 27, 4}, {4, 36}},
       [](const std::vector<Array>& x) {
         return fold(reshape(matmul(x[0], x[1]), {2, 3, 9, 36}), {6, 6}, kWindow);
       }},
  };
  for (const Case& c : cases) {
    for (DType dtype : {f32, f64}) {
      if (!supports(dtype)) continue;
      CAPTURE(c.name);
      CAPTURE(name(dtype));
      std::vector<Array> inputs;
      for (std::size_t i = 0; i < c.shapes.size(); ++i) {
        inputs.push_back(values(c.shapes[i], dtype, static_cast<std::uint32_t>(i + 1)));
      }
      FusionOptions without;
      without.windows = false;
      auto fused = filter_jit(c.f, {.name = "folded"});
      auto plain = filter_jit(c.f, {.name = "folded", .fusion = without});
      const Array want = c.f(inputs);
      CHECK(bytes_of(fused(inputs)) == bytes_of(want));
      CHECK(bytes_of(plain(inputs)) == bytes_of(want));
      const std::string text = fused.compiled_text();
      CAPTURE(text);
      const std::size_t kernels = count(text, "unfold_matmul]") + count(text, "matmul_fold]");
      CHECK(kernels == (on_cpu() ? 1u : 0u));
    }
  }
}
