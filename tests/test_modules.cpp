// kiln::nn against Equinox/JAX golden values (tests/golden/modules.txt, written by
// tests/golden/make_modules_golden.py): forward values of each layer with the
// weights loaded from the file, gradients of conv/pool/layernorm/linear, losses;
// plus initialisation, Dropout, Sequential and the shape error messages.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <kiln/kiln.hpp>
#include <map>
#include <random>
#include <sstream>

#include "finite_diff.hpp"
#include "golden_file.hpp"

using namespace kiln;

namespace {

using Record = std::map<std::string, Array>;

std::map<std::string, Record> load_golden() {
  std::map<std::string, Record> out;
  for (const auto& [case_name, records] : testing::load_golden_file("modules.txt")) {
    for (const auto& [name, r] : records) {
      if (r.dtype == "f32") {
        out[case_name][name] =
            array<float>(std::vector<float>(r.values.begin(), r.values.end()), r.shape);
      } else {
        out[case_name][name] = array<std::int32_t>(
            std::vector<std::int32_t>(r.values.begin(), r.values.end()), r.shape);
      }
    }
  }
  return out;
}

const Array& golden(const std::string& c, const std::string& name) {
  static const auto g = load_golden();
  const auto it = g.find(c);
  REQUIRE_MESSAGE(it != g.end(), "no golden case " << c);
  const auto jt = it->second.find(name);
  REQUIRE_MESSAGE(jt != it->second.end(), "no golden record " << c << " " << name);
  return jt->second;
}

void check_close(const Array& got, const Array& want, const std::string& what,
                 float rtol = 2e-5f, float atol = 2e-6f) {
  INFO(what);
  REQUIRE(!got.is_null());
  REQUIRE(to_string(got.shape()) == to_string(want.shape()));
  std::vector<float> g = got.to_vector<float>(), w = want.to_vector<float>();
  int bad = 0;
  for (std::size_t i = 0; i < g.size() && bad < 5; ++i) {
    if (!(std::abs(g[i] - w[i]) <= rtol * std::abs(w[i]) + atol)) {
      ++bad;
      CHECK_MESSAGE(false, "element " << i << ": kiln " << g[i] << " vs jax " << w[i]);
    }
  }
}

// d/d(model, x) of sum(f(model, x) * r).
template <class M, class F>
std::pair<M, Array> grads_of(const M& m, const Array& x, const Array& r, F f) {
  auto g = grad([&](const std::pair<M, Array>& mx, const Array& rr) {
    return sum(f(mx.first, mx.second) * rr);
  })(std::pair<M, Array>{m, x}, r);
  return {g.first, g.second};
}

Array key(std::uint32_t seed) { return random::key(seed); }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("Linear forward and gradients match Equinox") {
  nn::Linear lin(3, 5, key(0));
  lin.weight = golden("linear", "weight");
  lin.bias = golden("linear", "bias");
  const Array& x = golden("linear", "x");
  check_close(lin(x), golden("linear", "out"), "out");
  auto [g, gx] = grads_of(lin, x, golden("linear", "r"),
                          [](const nn::Linear& m, const Array& x) { return m(x); });
  check_close(gx, golden("linear", "grad_x"), "grad_x");
  check_close(g.weight, golden("linear", "grad_weight"), "grad_weight");
  check_close(g.bias, golden("linear", "grad_bias"), "grad_bias");
  CHECK(g.in_features == 3);
}

TEST_CASE("Linear without bias has a None bias and accepts any leading axes") {
  nn::Linear lin(4, 2, key(1), /*use_bias=*/false);
  CHECK(lin.bias.is_null());
  Array x = ones({2, 3, 4});
  Array y = lin(x);
  CHECK(to_string(y.shape()) == "(2, 3, 2)");
  Array row = sum(lin.weight, 1);  // each output is the row sum for all-ones input
  check_close(reshape(slice(y, {1, 2, 0}, {2, 3, 2}), {2}), row, "row sums");
}

TEST_CASE("Conv2d with padding matches Equinox, values and gradients") {
  nn::Conv2d conv(3, 4, 3, key(0), {.padding = 1});
  conv.weight = golden("conv_pad", "weight");
  conv.bias = golden("conv_pad", "bias");
  const Array& x = golden("conv_pad", "x");
  check_close(conv(x), golden("conv_pad", "out"), "out");
  auto [g, gx] = grads_of(conv, x, golden("conv_pad", "r"),
                          [](const nn::Conv2d& m, const Array& x) { return m(x); });
  check_close(gx, golden("conv_pad", "grad_x"), "grad_x");
  check_close(g.weight, golden("conv_pad", "grad_weight"), "grad_weight");
  check_close(g.bias, golden("conv_pad", "grad_bias"), "grad_bias");
}

TEST_CASE("Conv2d with stride, asymmetric padding, dilation and groups matches Equinox") {
  nn::Conv2d conv(4, 6, {3, 2}, key(0),
                  {.stride = {2, 1}, .padding = {{1, 2}, {0, 1}}, .dilation = {1, 2},
                   .groups = 2});
  CHECK(to_string(conv.weight.shape()) == "(6, 2, 3, 2)");
  conv.weight = golden("conv_strided", "weight");
  conv.bias = golden("conv_strided", "bias");
  const Array& x = golden("conv_strided", "x");
  check_close(conv(x), golden("conv_strided", "out"), "out");
  auto [g, gx] = grads_of(conv, x, golden("conv_strided", "r"),
                          [](const nn::Conv2d& m, const Array& x) { return m(x); });
  check_close(gx, golden("conv_strided", "grad_x"), "grad_x");
  check_close(g.weight, golden("conv_strided", "grad_weight"), "grad_weight");
}

TEST_CASE("Conv2d on one (C, H, W) image equals the batched result for that image") {
  nn::Conv2d conv(3, 4, 3, key(0), {.padding = 1});
  conv.weight = golden("conv_pad", "weight");
  conv.bias = golden("conv_pad", "bias");
  const Array& x = golden("conv_pad", "x");
  Array one = reshape(slice_axis(x, 0, 1, 2), {3, 7, 6});
  Array want = reshape(slice_axis(golden("conv_pad", "out"), 0, 1, 2), {4, 7, 6});
  check_close(conv(one), want, "unbatched");
}

TEST_CASE("conv2d gradients equal central finite differences (f64)") {
  std::mt19937 gen(7);
  auto rand = [&](const Shape& s) { return testing::uniform_array(gen, s); };
  const nn::ConvOptions opts{.stride = {1, 2}, .padding = {{0, 1}, {2, 1}}, .dilation = {2, 1},
                             .groups = 2};
  Array x = rand({1, 4, 5, 4}), w = rand({2, 2, 2, 3});
  Array r = rand(nn::conv2d(x, w, opts).shape());
  testing::check_finite_differences(
      [&](const std::vector<Array>& p) { return sum(nn::conv2d(p[0], p[1], opts) * r); },
      {x, w});
}

TEST_CASE("MaxPool2d and AvgPool2d match Equinox") {
  nn::MaxPool2d mp(3, {.stride = 2, .padding = 1});
  check_close(mp(golden("maxpool", "x")), golden("maxpool", "out"), "maxpool");
  nn::MaxPool2d tiled(2, {.stride = 2});  // 6x7 -> 3x3: the last column is dropped
  check_close(tiled(golden("maxpool_tiled", "x")), golden("maxpool_tiled", "out"), "tiled");
  nn::AvgPool2d ap({2, 3}, {.stride = 1, .padding = {{1, 0}, {1, 1}}});
  check_close(ap(golden("avgpool", "x")), golden("avgpool", "out"), "avgpool");
}

TEST_CASE("pool gradients match JAX") {
  nn::MaxPool2d mp(3, {.stride = 2, .padding = 1});
  auto gm = grad([&](const Array& x, const Array& r) { return sum(mp(x) * r); })(
      golden("maxpool_grad", "x"), golden("maxpool_grad", "r"));
  check_close(gm, golden("maxpool_grad", "grad_x"), "maxpool grad");
  nn::AvgPool2d ap({2, 3}, {.stride = 1, .padding = {{1, 0}, {1, 1}}});
  auto ga = grad([&](const Array& x, const Array& r) { return sum(ap(x) * r); })(
      golden("avgpool_grad", "x"), golden("avgpool_grad", "r"));
  check_close(ga, golden("avgpool_grad", "grad_x"), "avgpool grad");
}

TEST_CASE("LayerNorm over trailing axes matches Equinox, values and gradients") {
  nn::LayerNorm ln({4, 5});
  CHECK(ln.weight.to_vector<float>() == std::vector<float>(20, 1.0f));
  CHECK(ln.bias.to_vector<float>() == std::vector<float>(20, 0.0f));
  ln.weight = golden("layernorm", "weight");
  ln.bias = golden("layernorm", "bias");
  const Array& x = golden("layernorm", "x");
  check_close(ln(x), golden("layernorm", "out"), "out");
  auto [g, gx] = grads_of(ln, x, golden("layernorm", "r"),
                          [](const nn::LayerNorm& m, const Array& x) { return m(x); });
  check_close(gx, golden("layernorm", "grad_x"), "grad_x", 1e-4f, 1e-5f);
  check_close(g.weight, golden("layernorm", "grad_weight"), "grad_weight");
  check_close(g.bias, golden("layernorm", "grad_bias"), "grad_bias");
}

TEST_CASE("MultiheadAttention matches Equinox, with and without a mask") {
  nn::MultiheadAttention mha(2, 8, key(3),
                             {.key_size = 6, .value_size = 4, .output_size = 7,
                              .use_query_bias = true, .use_output_bias = true});
  CHECK(to_string(mha.query_proj.weight.shape()) == "(8, 8)");
  CHECK(to_string(mha.value_proj.weight.shape()) == "(8, 4)");
  CHECK(mha.key_proj.bias.is_null());
  for (auto* p : {&mha.query_proj, &mha.key_proj, &mha.value_proj, &mha.output_proj}) {
    const std::string name = p == &mha.query_proj   ? "query_proj"
                             : p == &mha.key_proj   ? "key_proj"
                             : p == &mha.value_proj ? "value_proj"
                                                    : "output_proj";
    p->weight = golden("mha", name + ".weight");
    if (!p->bias.is_null()) p->bias = golden("mha", name + ".bias");
  }
  const Array mask = astype(golden("mha", "mask"), bool_);
  const Array &q = golden("mha", "query"), &k = golden("mha", "key"), &v = golden("mha", "value");
  check_close(mha(q, k, v, mask), golden("mha", "out"), "masked");
  check_close(mha(q, k, v), golden("mha", "out_nomask"), "unmasked");
}

TEST_CASE("activations match jax.nn, and softmax stays finite for large logits") {
  const Array& x = golden("act", "x");
  check_close(nn::gelu(x), golden("act", "gelu"), "gelu");
  check_close(nn::gelu(x, false), golden("act", "gelu_exact"), "gelu_exact");
  check_close(nn::silu(x), golden("act", "silu"), "silu");
  check_close(nn::softmax(x), golden("act", "softmax"), "softmax", 2e-5f, 1e-7f);
  check_close(nn::log_softmax(x), golden("act", "log_softmax"), "log_softmax");
  check_close(nn::log_softmax(x, 0), golden("act", "log_softmax_axis0"), "log_softmax axis 0");
  check_close(grad([](const Array& x) { return sum(nn::gelu_exact(x)); })(x),
              golden("act", "grad_gelu_exact"), "grad gelu_exact", 2e-5f,
              // erf's rational approximation is exact in value to ~1e-7 but its
              // slope is off by up to 3.3e-6 at the clamp |x| = 4 (x ~ -5.6 here).
              1e-5f);
  CHECK(nn::relu(array<float>({-1, 2})).to_vector<float>() == std::vector<float>{0, 2});
}

TEST_CASE("softplus, log_sigmoid, elu and leaky_relu are jax.nn's, values and gradients") {
  const std::vector<double> xs = {-100, -20, -1.5, -0.0, 0, 0.7, 3, 30, 100};
  std::vector<float> xf(xs.begin(), xs.end());
  const Array x = array<float>(xf, {static_cast<std::int64_t>(xf.size())});
  const auto sig = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
  const auto softplus = [](double v) { return std::max(v, 0.0) + std::log1p(std::exp(-std::abs(v))); };
  const auto check = [&](const Array& got, auto want, const char* what) {
    CAPTURE(what);
    const std::vector<float> g = got.to_vector<float>();
    REQUIRE(g.size() == xs.size());
    for (std::size_t i = 0; i < xs.size(); ++i) {
      CAPTURE(xs[i]);
      CHECK(g[i] == doctest::Approx(want(xs[i])).epsilon(2e-6));
    }
  };
  check(nn::softplus(x), softplus, "softplus");
  check(nn::log_sigmoid(x), [&](double v) { return -softplus(-v); }, "log_sigmoid");
  check(nn::elu(x), [](double v) { return v > 0 ? v : std::expm1(v); }, "elu");
  check(nn::elu(x, 0.5), [](double v) { return v > 0 ? v : 0.5 * std::expm1(v); }, "elu 0.5");
  check(nn::leaky_relu(x), [](double v) { return v >= 0 ? v : 0.01 * v; }, "leaky_relu");
  check(nn::leaky_relu(x, 0.2), [](double v) { return v >= 0 ? v : 0.2 * v; }, "leaky_relu 0.2");
  const auto d = [&](auto f) { return grad([f](const Array& v) { return sum(f(v)); })(x); };
  check(d([](const Array& v) { return nn::softplus(v); }), sig, "softplus'");
  check(d([](const Array& v) { return nn::log_sigmoid(v); }), [&](double v) { return sig(-v); },
        "log_sigmoid'");
  check(d([](const Array& v) { return nn::elu(v); }), [](double v) { return v > 0 ? 1.0 : std::exp(v); },
        "elu'");
  check(d([](const Array& v) { return nn::leaky_relu(v); }), [](double v) { return v >= 0 ? 1.0 : 0.01; },
        "leaky_relu'");
  // No overflow anywhere: softplus(100) is 100, log_sigmoid(-100) is -100.
  CHECK(nn::softplus(array<float>({1e30f})).to_vector<float>()[0] == 1e30f);
}

TEST_CASE("losses match their JAX definitions, values and gradients") {
  const Array& logits = golden("loss", "logits");
  const Array& labels = golden("loss", "labels");
  auto [v1, g1] = value_and_grad([&](const Array& z) {
    return nn::softmax_cross_entropy_with_integer_labels(z, labels);
  })(logits);
  check_close(v1, golden("loss", "xent_int"), "xent_int");
  check_close(g1, golden("loss", "grad_xent_int"), "grad xent_int");
  const Array& targets = golden("loss", "targets");
  auto [v2, g2] = value_and_grad(
      [&](const Array& z) { return nn::softmax_cross_entropy(z, targets); })(logits);
  check_close(v2, golden("loss", "xent_onehot"), "xent_onehot");
  check_close(g2, golden("loss", "grad_xent_onehot"), "grad xent_onehot");
  const Array& tgt = golden("loss", "tgt");
  auto [v3, g3] = value_and_grad([&](const Array& p) { return nn::mse(p, tgt); })(
      golden("loss", "pred"));
  check_close(v3, golden("loss", "mse"), "mse");
  check_close(g3, golden("loss", "grad_mse"), "grad mse");
  CHECK(error_of([&] { nn::softmax_cross_entropy_with_integer_labels(logits, astype(labels, f32)); })
            .find("[nn.softmax_cross_entropy_with_integer_labels] labels must be i32 or u32, got f32") == 0);
  CHECK(error_of([&] { nn::mse(logits, tgt); }) ==
        "[nn.mse] predictions (6, 5) and targets (3, 4) must have the same shape");
}

TEST_CASE("initialisation reproduces Equinox for the same key, within +-1/sqrt(fan_in)") {
  nn::Linear lin(3, 5, key(7));
  check_close(lin.weight, golden("init_linear", "weight"), "linear weight", 1e-6f, 1e-7f);
  check_close(lin.bias, golden("init_linear", "bias"), "linear bias", 1e-6f, 1e-7f);
  nn::Conv2d conv(2, 4, {3, 2}, key(8));
  check_close(conv.weight, golden("init_conv", "weight"), "conv weight", 1e-6f, 1e-7f);
  check_close(conv.bias, golden("init_conv", "bias"), "conv bias", 1e-6f, 1e-7f);

  nn::Linear big(64, 128, key(1));
  const float lim = 1.0f / 8.0f;
  const std::vector<float> w = big.weight.to_vector<float>();
  CHECK(to_string(big.weight.shape()) == "(128, 64)");
  CHECK(max(abs(big.weight)).item<float>() <= lim);
  CHECK(max(abs(big.weight)).item<float>() > 0.99f * lim);  // fills the range
  CHECK(std::abs(mean(big.weight).item<float>()) < 0.01f);
  CHECK(nn::Linear(64, 128, key(1)).weight.to_vector<float>() == w);  // deterministic
  CHECK(nn::Linear(64, 128, key(2)).weight.to_vector<float>() != w);

  nn::MLP mlp(3, 2, 16, 2, key(4));
  REQUIRE(mlp.layers.size() == 3);
  CHECK(to_string(mlp.layers[0].weight.shape()) == "(16, 3)");
  CHECK(to_string(mlp.layers[1].weight.shape()) == "(16, 16)");
  CHECK(to_string(mlp.layers[2].weight.shape()) == "(2, 16)");
  CHECK(max(abs(mlp.layers[1].weight)).item<float>() <= 0.25f);
  CHECK(to_string(mlp(ones({5, 3})).shape()) == "(5, 2)");
  CHECK(error_of([] { nn::Linear(3, 4, Array()); }).find("[nn.Linear] a PRNG key is required") == 0);
}

TEST_CASE("an MLP rebuilt with the same activation has the same structure") {
  nn::MLP a(3, 2, 8, 1, key(0), nn::gelu);
  nn::MLP b(3, 2, 8, 1, key(1), nn::gelu);
  nn::MLP c(3, 2, 8, 1, key(0), nn::silu);
  CHECK(tree::structure(a) == tree::structure(b));
  CHECK(!(tree::structure(a) == tree::structure(c)));
  std::ostringstream os;
  os << tree::structure(c);
  CHECK(os.str().find("silu") != std::string::npos);
}

TEST_CASE("Embedding looks rows up by integer index") {
  nn::Embedding emb(10, 4, key(0));
  Array idx = array<std::int32_t>({3, 3, 9, 0}, {2, 2});
  Array y = emb(idx);
  CHECK(to_string(y.shape()) == "(2, 2, 4)");
  CHECK(reshape(slice_axis(y, 1, 0, 1), {2, 4}).to_vector<float>() ==
        concatenate({slice_axis(emb.weight, 0, 3, 4), slice_axis(emb.weight, 0, 9, 10)})
            .to_vector<float>());
  CHECK(error_of([&] { emb(ones({2})); }).find("[nn.Embedding] indices must be i32 or u32, got f32") == 0);
}

TEST_CASE("Dropout: inference is the identity; training zeroes about p and scales by 1/(1-p)") {
  Array x = ones({100, 100});
  CHECK(nn::Dropout(0.3, true)(x).same(x));
  CHECK(nn::Dropout(0.3)(x, Array(), /*inference=*/true).same(x));
  CHECK(nn::Dropout(0.0)(x).same(x));
  Array y = nn::Dropout(0.3)(x, key(5));
  const std::vector<float> v = y.to_vector<float>();
  int zeros_count = 0;
  for (float e : v) {
    if (e == 0.0f) {
      ++zeros_count;
    } else {
      CHECK(e == doctest::Approx(1.0 / 0.7));
    }
  }
  CHECK(zeros_count > 2700);
  CHECK(zeros_count < 3300);
  CHECK(nn::Dropout(0.3)(x, key(5)).to_vector<float>() == v);  // same key, same mask
  CHECK(nn::Dropout(0.3)(x, key(6)).to_vector<float>() != v);
  CHECK(error_of([&] { nn::Dropout(0.3)(x); }) ==
        "[nn.Dropout] a key is required in training mode (inference=false); pass a key or "
        "set inference=true");
  CHECK(error_of([] { nn::Dropout(1.5); }) == "[nn.Dropout] p must be in [0, 1], got 1.5");
}

TEST_CASE("Sequential holds different layer types as one pytree and differentiates") {
  nn::Sequential net(nn::Linear(3, 8, key(0)), nn::relu, nn::Lambda{nn::gelu},
                     nn::Dropout(0.5), nn::Linear(8, 2, key(1)));
  const std::vector<std::string> paths = tree::paths(net);
  CHECK(paths.front() == "layers[0].weight");
  Array x = array<float>({0.5f, -1.0f, 2.0f, 1.0f, 0.0f, -0.5f}, {2, 3});
  // Dropout in training mode needs the key; Sequential splits one per layer.
  CHECK(error_of([&] { net(x); }).find("[nn.Dropout] a key is required") == 0);
  Array y1 = net(x, key(9));
  CHECK(net(x, key(9)).to_vector<float>() == y1.to_vector<float>());
  auto g = grad([&](const decltype(net)& m) { return sum(m(x, key(9))); })(net);
  static_assert(std::is_same_v<decltype(g), decltype(net)>);
  CHECK(to_string(std::get<0>(g.layers).weight.shape()) == "(8, 3)");
  CHECK((std::get<1>(g.layers) == &nn::relu));
  CHECK(tree::structure(g) == tree::structure(net));

  // With the dropout switched to inference, the net is the plain composition.
  std::get<3>(net.layers).inference = true;
  const nn::Linear& l0 = std::get<0>(net.layers);
  const nn::Linear& l1 = std::get<4>(net.layers);
  check_close(net(x), l1(nn::gelu(nn::relu(l0(x)))), "composition");
}

TEST_CASE("wrong input shapes are errors naming the module and both shapes") {
  nn::Conv2d conv(3, 4, 3, key(0));
  CHECK(error_of([&] { conv(ones({2, 4, 8, 8})); }) ==
        "[nn.Conv2d] expected input (N, 3, H, W) or (3, H, W), got (2, 4, 8, 8)");
  CHECK(error_of([&] { conv(ones({8, 8})); }) ==
        "[nn.Conv2d] expected input (N, 3, H, W) or (3, H, W), got (8, 8)");
  CHECK(error_of([&] {
          conv(ones({1, 3, 2, 2}));
        }) ==
        "[nn.Conv2d] input (1, 3, 2, 2): [conv2d] the (padded) input extent 2 is smaller than "
        "the dilated kernel extent 3 on spatial axis 0");
  nn::Linear lin(3, 4, key(0));
  CHECK(error_of([&] { lin(ones({2, 4})); }) ==
        "[nn.Linear] expected input (..., 3), got (2, 4)");
  CHECK(error_of([&] { lin(ones({2, 3}, i32)); }) ==
        "[nn.Linear] input must be floating, got i32 of shape (2, 3)");
  nn::LayerNorm ln({4, 5});
  CHECK(error_of([&] { ln(ones({3, 5, 4})); }) ==
        "[nn.LayerNorm] expected input (..., 4, 5), got (3, 5, 4)");
  CHECK(error_of([&] { nn::MaxPool2d(2)(ones({4, 4})); }) ==
        "[nn.MaxPool2d] expected input (N, C, H, W) or (C, H, W), got (4, 4)");
  nn::MultiheadAttention mha(2, 8, key(0));
  CHECK(error_of([&] { mha(ones({5, 8}), ones({6, 7}), ones({6, 8})); }) ==
        "[nn.MultiheadAttention] expected key (..., S, 8), got (6, 7)");
  CHECK(error_of([] { nn::Conv2d(3, 4, 3, key(0), {.groups = 2}); }) ==
        "[nn.Conv2d] in_channels (3) and out_channels (4) must be >= 1 and divisible by "
        "groups (2)");
  CHECK(error_of([] { nn::pad(ones({2}), {{-1, 0}}); }) ==
        "[pad] widths must be >= 0, got (-1, 0) for axis 0");
}

TEST_CASE("pad surrounds an array with a constant") {
  Array p = nn::pad(array<float>({1, 2, 3, 4}, {2, 2}), {{1, 0}, {0, 2}}, 9.0);
  CHECK(to_string(p.shape()) == "(3, 4)");
  CHECK(p.to_vector<float>() ==
        std::vector<float>{9, 9, 9, 9, 1, 2, 9, 9, 3, 4, 9, 9});
}

TEST_CASE("Embedding initialises normal(std), uniform(scale), zeros, or from a given weight") {
  // The default stays Equinox's standard normal, drawn from the key as before.
  const nn::Embedding standard(1000, 8, key(0));
  CHECK(standard.weight.to_vector<float>() == random::normal(key(0), {1000, 8}).to_vector<float>());
  check_close(nn::Embedding(1000, 8, key(0), nn::EmbeddingInit::normal(0.02)).weight,
              standard.weight * 0.02, "normal(0.02)");
  const Array u = nn::Embedding(1000, 8, key(1), nn::EmbeddingInit::uniform(0.1)).weight;
  CHECK(max(abs(u)).item<float>() <= 0.1f);
  CHECK(max(abs(u)).item<float>() > 0.099f);
  CHECK(std::abs(mean(u).item<float>()) < 0.005f);
  const nn::Embedding zero(4, 3, Array(), nn::EmbeddingInit::zeros());
  CHECK(zero.weight.to_vector<float>() == std::vector<float>(12, 0.0f));
  // padding_idx zeroes that row and leaves the others as drawn.
  const Array padded =
      nn::Embedding(4, 3, key(2), nn::EmbeddingInit::normal().with_padding_idx(1)).weight;
  const Array drawn = random::normal(key(2), {4, 3});
  CHECK(slice_axis(padded, 0, 1, 2).to_vector<float>() == std::vector<float>(3, 0.0f));
  CHECK(slice_axis(padded, 0, 2, 4).to_vector<float>() ==
        slice_axis(drawn, 0, 2, 4).to_vector<float>());
  const Array w = array<float>({0, 1, 2, 3, 4, 5}, {3, 2});
  const nn::Embedding given = nn::Embedding::from_weight(w, 3, 2);
  CHECK(given(array<std::int32_t>({2, 0}, {2})).to_vector<float>() ==
        std::vector<float>{4, 5, 0, 1});
  CHECK(error_of([&] { nn::Embedding::from_weight(w, 3, 3); }) ==
        "[nn.Embedding] expected weight (3, 3), got (3, 2)");
  CHECK(error_of([] { nn::Embedding::from_weight(ones({6})); }) ==
        "[nn.Embedding] expected weight (num_embeddings, embedding_size), got (6,)");
  CHECK(error_of([] {
          nn::Embedding::from_weight(ones({3, 2}, i32));
        }) == "[nn.Embedding] weight must be floating, got i32 of shape (3, 2)");
  CHECK(error_of([] {
          nn::Embedding(4, 3, key(0), nn::EmbeddingInit::zeros().with_padding_idx(4));
        }) == "[nn.Embedding] padding_idx must be in [0, 4), got 4");
  CHECK(error_of([] { nn::Embedding(4, 3, key(0), nn::EmbeddingInit::uniform(0)); }) ==
        "[nn.Embedding] uniform init scale must be > 0, got 0");
  CHECK(error_of([] { nn::Embedding(0, 3, key(0)); }) ==
        "[nn.Embedding] num_embeddings and embedding_size must be >= 1, got 0 and 3");
  CHECK(error_of([] {
          nn::Embedding(4, 3, Array());
        }).find("[nn.Embedding] a PRNG key is required") == 0);
}
