// Control flow (scan, fori_loop, while_loop, cond, switch_case), checkpoint,
// custom_vjp and nested jit: values against plain C++ loops, gradients against
// the unrolled program and finite differences, programs that hold one loop
// whatever the trip count, and errors by content. Device-generic (KILN_DEVICE).
#include <doctest/doctest.h>

#include <cmath>
#include <kiln/kiln.hpp>
#include <tuple>
#include <vector>

#include "check_close.hpp"

#include "kiln/dsl/trace.hpp"

using namespace kiln;
using kiln::testing::check_close;

namespace {

Device dev() { return default_device(); }

Array vec(std::vector<float> v) {
  const auto n = static_cast<std::int64_t>(v.size());
  return to_device(Array::from_data<float>(v, {n}), dev());
}


// The tanh RNN of these tests, as a scan and as the unrolled C++ loop.
std::pair<Array, Array> rnn_scan(const Array& w, const Array& h0, const Array& xs) {
  return scan(
      [&](const Array& h, const Array& x) {
        const Array n = tanh(matmul(h, w) + x);
        return std::pair{n, sum(n * n)};
      },
      h0, xs);
}
std::pair<Array, Array> rnn_loop(const Array& w, const Array& h0, const Array& xs) {
  Array h = h0;
  std::vector<Array> ys;
  for (std::int64_t t = 0; t < xs.shape()[0]; ++t) {
    h = tanh(matmul(h, w) + reshape(slice_axis(xs, 0, t, t + 1), {xs.shape()[1]}));
    ys.push_back(sum(h * h));
  }
  return {h, stack(ys)};
}

std::size_t count_prim(const Program& p, Prim prim) {
  std::size_t n = 0;
  for (const Equation& e : p.equations) n += e.prim == prim ? 1 : 0;
  return n;
}

struct Rnn {
  Array w, h0, xs;
  static Rnn make(std::int64_t steps) {
    const Array keys = random::split(random::key(7), 3);
    return Rnn{to_device(random::normal(random::subkey(keys, 0), {4, 4}) * 0.5, dev()),
               to_device(random::normal(random::subkey(keys, 1), {4}), dev()),
               to_device(random::normal(random::subkey(keys, 2), {steps, 4}), dev())};
  }
};

}  // namespace

TEST_CASE(
    "scan equals the C++ loop, eagerly and jitted, and its gradient equals the unrolled one") {
  const Rnn r = Rnn::make(6);
  auto [h, ys] = rnn_scan(r.w, r.h0, r.xs);
  auto [h_ref, ys_ref] = rnn_loop(r.w, r.h0, r.xs);
  check_close(h, h_ref);
  check_close(ys, ys_ref);

  auto jitted = filter_jit(
      [](const Array& w, const Array& h0, const Array& xs) { return rnn_scan(w, h0, xs); });
  auto [hj, ysj] = jitted(r.w, r.h0, r.xs);
  check_close(hj, h_ref);
  check_close(ysj, ys_ref);

  const auto loss_scan = [&](const Array& w) {
    auto [hh, yy] = rnn_scan(w, r.h0, r.xs);
    return sum(yy) + sum(hh);
  };
  const auto loss_loop = [&](const Array& w) {
    auto [hh, yy] = rnn_loop(w, r.h0, r.xs);
    return sum(yy) + sum(hh);
  };
  check_close(grad(loss_scan)(r.w), grad(loss_loop)(r.w), 1e-4);

  // The same gradient compiled: grad inside filter_jit.
  auto step = filter_jit([&](const Array& w) { return grad(loss_scan)(w); });
  check_close(step(r.w), grad(loss_loop)(r.w), 1e-4);

  // Gradients with respect to the initial carry and the xs too.
  auto g_all = grad([&](const std::tuple<Array, Array, Array>& a) {
    auto [hh, yy] = rnn_scan(std::get<0>(a), std::get<1>(a), std::get<2>(a));
    return sum(yy) + sum(hh);
  })(std::tuple{r.w, r.h0, r.xs});
  auto g_ref = grad([&](const std::tuple<Array, Array, Array>& a) {
    auto [hh, yy] = rnn_loop(std::get<0>(a), std::get<1>(a), std::get<2>(a));
    return sum(yy) + sum(hh);
  })(std::tuple{r.w, r.h0, r.xs});
  check_close(std::get<1>(g_all), std::get<1>(g_ref), 1e-4);
  check_close(std::get<2>(g_all), std::get<2>(g_ref), 1e-4);
}

TEST_CASE("a jitted scan is one loop whatever its length: the program does not grow") {
  std::size_t sizes[2] = {0, 0};
  std::size_t k = 0;
  for (std::int64_t steps : {4, 64}) {
    const Rnn r = Rnn::make(steps);
    Trace t;
    const Array w = t.input(r.w.aval(), dev(), "w");
    const Array g = grad([&](const Array& ww) {
      auto [hh, yy] = rnn_scan(ww, r.h0, r.xs);
      return sum(yy);
    })(w);
    Program p = t.finish(std::span<const Array>(&g, 1));
    optimize(p);
    CHECK(count_prim(p, Prim::kScanLoop) == 2);  // forward and backward
    CHECK(count_prim(p, Prim::kTanh) == 0);      // inside the bodies only
    sizes[k++] = p.equations.size();
    const std::string text = to_string(p);
    CHECK(text.find("scan[body={ lambda") != std::string::npos);
    CHECK(text.find(std::string("length=") + std::to_string(steps)) != std::string::npos);
  }
  CHECK(sizes[0] == sizes[1]);
}

TEST_CASE("scan: reverse, pytree carries, no xs with a length, and errors naming the path") {
  const Array xs = vec({1, 2, 3, 4});
  auto [c, ys] = scan(
      [](const Array& acc, const Array& x) {
        return std::pair{acc + x, acc};
      },
      full({}, 0.0, f32, dev()), xs, std::nullopt, true);
  CHECK(c.item<float>() == 10.0f);
  CHECK(ys.to_vector<float>() == std::vector<float>{9, 7, 4, 0});  // indexed by position

  using Carry = std::tuple<Array, std::vector<Array>>;
  auto [carry, none] = scan(
      [](const Carry& cc, const std::tuple<>&) {
        const auto& [i, v] = cc;
        return std::pair{Carry{i + 1, {v[0] * 2.0, v[1] + 1.0}}, std::tuple<>{}};
      },
      Carry{zeros({}, i32, dev()), {vec({1}), vec({0, 0})}}, std::tuple<>{}, 5);
  CHECK(std::get<0>(carry).item<std::int32_t>() == 5);
  CHECK(std::get<1>(carry)[0].to_vector<float>() == std::vector<float>{32});
  CHECK(std::get<1>(carry)[1].to_vector<float>() == std::vector<float>{5, 5});

  CHECK_THROWS_WITH_AS(
      scan(
          [](const Carry& cc, const Array&) {
            return std::pair{
                Carry{std::get<0>(cc),
                      {std::get<1>(cc)[0], concatenate({std::get<1>(cc)[1], vec({1})})}},
                std::tuple<>{}};
          },
          Carry{zeros({}, i32, dev()), {vec({1}), vec({0, 0})}}, xs),
      doctest::Contains(
          "[scan] carry [1][1]: the body returned f32(3,) but the carry went in as f32(2,)"),
      ShapeError);
  CHECK_THROWS_WITH_AS(scan(
                           [](const Array& a, const Array&) {
                             return std::pair{std::vector<Array>{a}, a};
                           },
                           vec({1}), xs),
                       doctest::Contains("[scan] carry must keep the structure"), TreeError);
  CHECK_THROWS_WITH_AS(
      scan(
          [](const Array& a, const std::vector<Array>&) {
            return std::pair{a, a};
          },
          vec({1}), std::vector<Array>{xs, vec({1, 2})}),
      doctest::Contains("[scan] xs[1] has leading extent 2 but the first xs leaf has 4"),
      ShapeError);
  CHECK_THROWS_WITH_AS(scan(
                           [](const Array& a, const std::tuple<>&) {
                             return std::pair{a, a};
                           },
                           vec({1}), std::tuple<>{}),
                       doctest::Contains("pass length"), ValueError);
}

TEST_CASE("fori_loop: static bounds, differentiable, one loop in the program") {
  // acc_{i+1} = acc_i * x + i  (Horner-like), from acc_0 = x.
  const auto f = [](const Array& x) {
    return fori_loop(
        0, 5, [&](const Array& i, const Array& acc) { return acc * x + astype(i, f32); }, x);
  };
  const auto f_loop = [](const Array& x) {
    Array acc = x;
    for (int i = 0; i < 5; ++i) acc = acc * x + static_cast<float>(i);
    return acc;
  };
  const Array x = vec({0.5f, -0.7f, 1.1f});
  check_close(f(x), f_loop(x));
  check_close(grad([&](const Array& a) { return sum(f(a)); })(x),
              grad([&](const Array& a) { return sum(f_loop(a)); })(x), 1e-5);
  auto jf = filter_jit(f);
  check_close(jf(x), f_loop(x));
  CHECK(jf.compiled_text().find("scan[") != std::string::npos);
  // An empty range runs nothing.
  CHECK(fori_loop(
            3, 3, [](const Array&, const Array& a) { return a * 2.0; }, x)
            .to_vector<float>() == x.to_vector<float>());
}

TEST_CASE("while_loop: a Newton solver on the device, jitted; forward only") {
  // sqrt(a) by Newton's method, until |x^2 - a| < 1e-5 (per element: all).
  const auto newton = [](const Array& a) {
    using C = std::tuple<Array, Array>;
    const C out =
        while_loop([&](const C& c) { return max(abs(std::get<0>(c) * std::get<0>(c) - a)) > 1e-5; },
                   [&](const C& c) {
                     const Array& x = std::get<0>(c);
                     return C{0.5 * (x + a / x), std::get<1>(c) + 1};
                   },
                   C{ones_like(a), zeros({}, i32, a.device())});
    return out;
  };
  const Array a = vec({2, 9, 0.25f, 100});
  auto [root, iters] = newton(a);
  check_close(root, vec({std::sqrt(2.0f), 3, 0.5f, 10}), 1e-5);
  // The same iteration in plain C++ (all four elements, until all converge).
  int want_iters = 0;
  for (std::vector<float> x(4, 1.0f), av{2, 9, 0.25f, 100};; ++want_iters) {
    float worst = 0;
    for (int i = 0; i < 4; ++i) worst = std::max(worst, std::fabs(x[i] * x[i] - av[i]));
    if (!(worst > 1e-5f)) break;
    for (int i = 0; i < 4; ++i) x[i] = 0.5f * (x[i] + av[i] / x[i]);
  }
  CHECK(iters.item<std::int32_t>() == want_iters);

  auto jitted = filter_jit(newton);
  auto [root_j, iters_j] = jitted(a);
  CHECK(root_j.to_vector<float>() == root.to_vector<float>());
  CHECK(iters_j.item<std::int32_t>() == want_iters);
  // A condition false at once runs the body zero times.
  auto [same, zero] = jitted(vec({1, 1, 1, 1}));
  CHECK(zero.item<std::int32_t>() == 0);
  CHECK(same.to_vector<float>() == std::vector<float>{1, 1, 1, 1});
  CHECK(jitted.trace_count() == 1);

  CHECK_THROWS_WITH_AS(grad([&](const Array& x) { return sum(std::get<0>(newton(x))); })(a),
                       doctest::Contains("[while_loop] reverse-mode differentiation"), ValueError);
  CHECK_THROWS_WITH_AS(
      while_loop([](const Array& c) { return c; }, [](const Array& c) { return c; }, vec({1})),
      doctest::Contains("[while_loop] cond must return a bool scalar array, got f32(1,)"),
      ValueError);
}

TEST_CASE(
    "cond and switch_case: the predicate is data (one trace), gradients flow through the branch "
    "taken") {
  const auto f = [](const Array& x) {
    return cond(
        sum(x) > 0.0, [](const Array& v) { return v * v; }, [](const Array& v) { return sin(v); },
        x);
  };
  auto jf = filter_jit(f);
  const Array pos = vec({1, 2}), negv = vec({-1, -2});
  check_close(jf(pos), vec({1, 4}));
  check_close(jf(negv), sin(negv));
  CHECK(jf.trace_count() == 1);
  check_close(grad([&](const Array& x) { return sum(f(x)); })(pos), vec({2, 4}));
  check_close(grad([&](const Array& x) { return sum(f(x)); })(negv), cos(negv));
  auto jg = filter_jit(
      [&](const Array& x) { return grad([&](const Array& y) { return sum(f(y)); })(x); });
  check_close(jg(negv), cos(negv));
  check_close(jg(pos), vec({2, 4}));

  // A branch may use arrays from outside (closed over) and the operand.
  const Array w = vec({10, 20});
  const auto g = [&](const Array& i, const Array& x) {
    return switch_case(
        i, x, [&](const Array& v) { return v + w; }, [&](const Array& v) { return v * w; },
        [](const Array& v) { return -v; });
  };
  const Array x = vec({1, 2});
  CHECK(g(full({}, 0, i32, dev()), x).to_vector<float>() == std::vector<float>{11, 22});
  CHECK(g(full({}, 1, i32, dev()), x).to_vector<float>() == std::vector<float>{10, 40});
  CHECK(g(full({}, 7, i32, dev()), x).to_vector<float>() == std::vector<float>{-1, -2});  // clamped
  CHECK(g(full({}, -3, i32, dev()), x).to_vector<float>() == std::vector<float>{11, 22});

  CHECK_THROWS_WITH_AS(
      cond(
          sum(pos) > 0.0, [](const Array& v) { return v; },
          [](const Array& v) {
            return concatenate({v, v});
          },
          pos),
      doctest::Contains(
          "[cond] true_fn's result (vs false_fn's) <root>: got f32(2,), expected f32(4,)"),
      ShapeError);
  CHECK_THROWS_WITH_AS(
      cond(
          pos, [](const Array& v) { return v; }, [](const Array& v) { return v; }, pos),
      doctest::Contains(
          "[cond] the predicate / index must be a bool or integer scalar array, got f32(2,)"),
      ValueError);
}

TEST_CASE("nested jit: a jitted function called inside another jit and inside grad") {
  auto inner =
      filter_jit([](const Array& a, const Array& b) { return tanh(a * b); }, {.name = "inner"});
  auto outer = filter_jit([&](const Array& x) { return sum(inner(x, x + 1.0)); });
  const Array x = vec({0.1f, 0.2f, -0.3f});
  const float want = sum(tanh(x * (x + 1.0))).item<float>();
  CHECK(outer(x).item<float>() == doctest::Approx(want));
  CHECK(inner.trace_count() == 1);
  CHECK(outer.trace_count() == 1);
  // Its cache is shared with calls outside: a top-level call of the same
  // avals is a hit, not a trace.
  CHECK(inner(x, x).to_vector<float>() == tanh(x * x).to_vector<float>());
  CHECK(inner.trace_count() == 1);
  const Array g = grad([&](const Array& a) { return sum(inner(a, a)); })(x);
  check_close(g, 2.0 * x * (1.0 - (tanh(x * x) * tanh(x * x))), 1e-5);
}

TEST_CASE("checkpoint: the same values and gradients, less memory kept for the backward pass") {
  // A deep MLP: 16 layers of 256, batch 512, checkpointed in blocks of 4
  // layers: the backward pass keeps 5 block inputs and one block's
  // recomputed activations instead of all 16 activations.
  const int kLayers = 16, kBlock = 4;
  const Array keys = random::split(random::key(3), kLayers + 1);
  std::vector<Array> ws;
  for (int i = 0; i < kLayers; ++i) {
    ws.push_back(
        to_device(random::normal(random::subkey(keys, i), {256, 256}) * (1.0 / 16), dev()));
  }
  const Array x = to_device(random::normal(random::subkey(keys, kLayers), {512, 256}), dev());
  const auto block = [](const Array& h0, const std::vector<Array>& w) {
    Array h = h0;
    for (const Array& wi : w) h = tanh(matmul(h, wi));
    return h;
  };
  const auto remat_block = checkpoint(block, "block");
  const auto loss = [&](bool remat) {
    return [&, remat](const std::vector<Array>& w) {
      Array h = x;
      for (int b = 0; b < kLayers; b += kBlock) {
        const std::vector<Array> wb(w.begin() + b, w.begin() + b + kBlock);
        h = remat ? remat_block(h, wb) : block(h, wb);
      }
      return sum(h * h);
    };
  };
  auto plain = filter_jit([&](const std::vector<Array>& w) { return grad(loss(false))(w); });
  auto remat = filter_jit([&](const std::vector<Array>& w) { return grad(loss(true))(w); });
  const std::vector<Array> g0 = plain(ws), g1 = remat(ws);
  for (std::size_t i = 0; i < g0.size(); ++i) check_close(g1[i], g0[i], 1e-4);
  const std::size_t peak_plain = plain.last_run().peak_bytes;
  const std::size_t peak_remat = remat.last_run().peak_bytes;
  MESSAGE("peak bytes: plain ", peak_plain, ", checkpointed ", peak_remat);
  const std::size_t act = 512 * 256 * 4, weights = kLayers * 256 * 256 * 4;
  // x is a constant of the program (captured), not counted.
  CHECK(peak_plain >= weights + 16 * act);
  CHECK(peak_remat <= weights + 9 * act);
  CHECK(remat.compiled_text().find("call[body=") != std::string::npos);
  CHECK(remat.compiled_text().find("name=block") != std::string::npos);
}

TEST_CASE("custom_vjp: straight-through estimators and clipped gradients, also inside filter_jit") {
  // round() with the identity's gradient.
  const auto ste = custom_vjp([](const Array& x) { return round(x); },
                              [](const Array& x) {
                                return std::pair{round(x), std::tuple<>{}};
                              },
                              [](const std::tuple<>&, const Array& g) { return g; }, "ste_round");
  const Array x = vec({0.4f, 1.6f, -2.2f});
  CHECK(ste(x).to_vector<float>() == std::vector<float>{0, 2, -2});
  CHECK(grad([&](const Array& a) { return sum(ste(a) * a); })(x).to_vector<float>() ==
        (round(x) + x).to_vector<float>());
  // Gradient clipping in the backward pass: y = x, dy/dx clipped to [-1, 1].
  const auto clip_grad =
      custom_vjp([](const Array& a, const Array& s) { return a * s; },
                 [](const Array& a, const Array& s) {
                   return std::pair{a * s, s};
                 },
                 [](const Array& s, const Array& g) {
                   return std::tuple{clip(g * s, -1.0, 1.0), Array()};  // None: no gradient for s
                 });
  const Array s = vec({3, 3, 3});
  auto jg = filter_jit([&](const Array& a) {
    return grad([&](const Array& b) { return sum(clip_grad(b, s) * vec({1, 0.1f, -2})); })(a);
  });
  check_close(jg(x), vec({1, 0.3f, -1}));
  CHECK_THROWS_WITH_AS(
      custom_vjp([](const Array& a) { return a; },
                 [](const Array& a) {
                   return std::pair{a, a};
                 },
                 [](const Array&, const Array& g) {
                   return concatenate({g, g});
                 })(x),
      doctest::Contains(
          "[custom_vjp] bwd's cotangents (vs the arguments) [0]: got f32(6,), expected f32(3,)"),
      ShapeError);
}
