// take(a, indices, axis, batch_dims): tf.gather with batch dimensions (a
// composite, dsl/ops_gather.cpp). Values against a loop over the definition,
// gradients against finite differences, one trace under filter_jit, errors.
// Arrays are created on the default device, so this runs on every backend.
#include <doctest/doctest.h>

#include <cstdint>
#include <kiln/kiln.hpp>
#include <random>
#include <vector>

#include "kiln/dsl/trace.hpp"

using namespace kiln;

namespace {

using I = std::int32_t;
using U = std::uint32_t;

std::vector<float> random_floats(std::int64_t n, std::uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = u(g);
  return v;
}

std::vector<I> random_indices(std::int64_t n, I lo, I hi, std::uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_int_distribution<I> u(lo, hi);
  std::vector<I> v(static_cast<std::size_t>(n));
  for (I& x : v) x = u(g);
  return v;
}

// Row-major strides of `s`.
std::vector<std::int64_t> strides(const Shape& s) {
  std::vector<std::int64_t> st(s.size(), 1);
  for (std::size_t d = s.size(); d-- > 1;) st[d - 1] = st[d] * s[d];
  return st;
}

// The definition, one output element at a time:
// out[n..., p..., i..., q...] = a[n..., p..., indices[n..., i...], q...].
std::vector<float> gather_reference(const std::vector<float>& a, const Shape& as,
                                    const std::vector<I>& idx, const Shape& is, std::int64_t axis,
                                    std::int64_t b) {
  Shape out(as.begin(), as.begin() + axis);
  out.insert(out.end(), is.begin() + b, is.end());
  out.insert(out.end(), as.begin() + axis + 1, as.end());
  const auto ost = strides(out), ast = strides(as), ist = strides(is);
  const std::int64_t ni = static_cast<std::int64_t>(is.size()) - b;  // index axes past the batch
  std::vector<float> r(static_cast<std::size_t>(numel(out)));
  for (std::int64_t o = 0; o < numel(out); ++o) {
    std::vector<std::int64_t> oi(out.size());
    for (std::size_t d = 0; d < out.size(); ++d) oi[d] = (o / ost[d]) % out[d];
    std::int64_t ip = 0;  // position in indices: batch axes, then the index axes
    for (std::int64_t d = 0; d < b; ++d) ip += oi[d] * ist[d];
    for (std::int64_t d = 0; d < ni; ++d) ip += oi[axis + d] * ist[b + d];
    std::int64_t k = idx[static_cast<std::size_t>(ip)];
    if (k < 0) k += as[axis];
    std::int64_t ap = k * ast[axis];
    for (std::int64_t d = 0; d < axis; ++d) ap += oi[d] * ast[d];
    for (std::size_t d = axis + 1; d < as.size(); ++d) ap += oi[d - 1 + ni] * ast[d];
    r[static_cast<std::size_t>(o)] = a[static_cast<std::size_t>(ap)];
  }
  return r;
}

struct GatherCase {
  Shape as, is;
  std::int64_t axis, batch_dims;
};

}  // namespace

TEST_CASE("take with batch_dims gathers each batch element from its own slice, as tf.gather") {
  // a [2, 3] batch (n), [4] indexed; and every placement of p, i and q axes.
  const GatherCase cases[] = {
      {{2, 3, 4}, {2, 3, 5}, 2, 2},     // no p, no q
      {{2, 4, 3}, {2, 5}, 1, 1},        // q after the axis
      {{2, 3, 4, 5}, {2, 2, 6}, 2, 1},  // p between batch and axis, i of rank 2, q
      {{3, 4}, {3}, 1, 1},              // indices all batch: one pick per batch element
      {{2, 3, 4}, {2, 3}, -1, -1},      // negative axis and batch_dims
      {{2, 0, 4}, {2, 0, 3}, 2, 2},     // an empty batch axis
      {{2, 5}, {2, 0}, 1, 1},           // no indices
  };
  std::uint32_t seed = 1;
  for (const GatherCase& c : cases) {
    CAPTURE(to_string(c.as));
    CAPTURE(to_string(c.is));
    CAPTURE(c.axis);
    CAPTURE(c.batch_dims);
    const std::int64_t ax = c.axis < 0 ? c.axis + static_cast<std::int64_t>(c.as.size()) : c.axis;
    const std::int64_t b =
        c.batch_dims < 0 ? c.batch_dims + static_cast<std::int64_t>(c.is.size()) : c.batch_dims;
    const I len = static_cast<I>(c.as[static_cast<std::size_t>(ax)]);
    const std::vector<float> av = random_floats(numel(c.as), seed++);
    const std::vector<I> iv = random_indices(numel(c.is), -len, len - 1, seed++);  // negatives too
    const Array got = take(array<float>(av, c.as), array<I>(iv, c.is), c.axis, c.batch_dims);
    Shape want_shape(c.as.begin(), c.as.begin() + ax);
    want_shape.insert(want_shape.end(), c.is.begin() + b, c.is.end());
    want_shape.insert(want_shape.end(), c.as.begin() + ax + 1, c.as.end());
    CHECK(got.shape() == want_shape);
    CHECK(got.to_vector<float>() == gather_reference(av, c.as, iv, c.is, ax, b));
  }
  // batch_dims 0 is numpy's take; u32 indices and integer arrays too.
  Array m = reshape(arange(12), {3, 4});
  CHECK(take(m, array<U>({3, 0}), 1, 0).to_vector<I>() ==
        take(m, array<U>({3, 0}), 1).to_vector<I>());
  CHECK(take(m, array<U>({3, 0, 1, 1, 2, 0}, {3, 2}), 1, 1).to_vector<I>() ==
        std::vector<I>{3, 0, 5, 5, 10, 8});
}

TEST_CASE(
    "take with batch_dims differentiates through take_along_axis: gradients match finite "
    "differences") {
  const Shape as{2, 3, 4}, is{2, 5};
  const std::vector<float> av = random_floats(numel(as), 11);
  const std::vector<I> iv = {0, 3, 3, -1, 1, 2, 2, 0, -4, 2};  // repeats add up
  const Array idx = array<I>(iv, is);
  const Array w = array<float>(random_floats(2 * 3 * 5, 12), {2, 3, 5});
  // a is [2, 3, 4]; batch 2, axis 2 (p = 3): out [2, 3, 5].
  auto loss = [&](const Array& a) { return sum(take(a, idx, 2, 1) * w); };
  const Array a = array<float>(av, as);
  const std::vector<float> g = grad(loss)(a).to_vector<float>();
  REQUIRE(g.size() == av.size());
  const float eps = 1e-2f;
  for (std::size_t k = 0; k < av.size(); ++k) {
    std::vector<float> hi = av, lo = av;
    hi[k] += eps;
    lo[k] -= eps;
    const float fd =
        (loss(array<float>(hi, as)).item<float>() - loss(array<float>(lo, as)).item<float>()) /
        (2 * eps);
    CAPTURE(k);
    CHECK(g[k] == doctest::Approx(fd).epsilon(1e-3).scale(1.0));
  }
  // And exactly: the weights of the picks, summed where an index repeats.
  const std::vector<float> wv = w.to_vector<float>();
  std::vector<float> want(av.size(), 0.0f);
  for (int n = 0; n < 2; ++n) {
    for (int p = 0; p < 3; ++p) {
      for (int i = 0; i < 5; ++i) {
        const int k = (iv[static_cast<std::size_t>(n * 5 + i)] + 4) % 4;
        want[static_cast<std::size_t>((n * 3 + p) * 4 + k)] +=
            wv[static_cast<std::size_t>((n * 3 + p) * 5 + i)];
      }
    }
  }
  for (std::size_t k = 0; k < want.size(); ++k)
    CHECK(g[k] == doctest::Approx(want[k]).epsilon(1e-6));
}

TEST_CASE("take with batch_dims traces once under filter_jit and adds no primitive of its own") {
  int traces = 0;
  auto f = filter_jit([&](const Array& a, const Array& idx) {
    ++traces;
    return take(a, idx, 1, 1);
  });
  const Array a = array<float>(random_floats(2 * 4 * 3, 21), {2, 4, 3});
  const Array i1 = array<I>({0, 3, 1, 1}, {2, 2});
  const Array i2 = array<I>({2, 2, -1, 0}, {2, 2});
  CHECK(f(a, i1).to_vector<float>() == take(a, i1, 1, 1).to_vector<float>());
  CHECK(f(a, i2).to_vector<float>() == take(a, i2, 1, 1).to_vector<float>());
  CHECK(traces == 1);
  CHECK(f.trace_count() == 1);
  // Its program: reshapes around one take_along_axis.
  Trace t;
  const Array x = t.input(a.aval(), Device::cpu(), "a");
  const Array k = t.input(i1.aval(), Device::cpu(), "idx");
  const Array out = take(x, k, 1, 1);
  const Program prog = t.finish(std::span<const Array>(&out, 1));
  int gathers = 0;
  for (const Equation& e : prog.equations) {
    CHECK((e.prim == Prim::kTakeAlongAxis || e.prim == Prim::kReshape));
    gathers += e.prim == Prim::kTakeAlongAxis ? 1 : 0;
  }
  CHECK(gathers == 1);
  // grad under jit too.
  auto g = filter_jit([](const Array& a, const Array& idx) {
    return grad([&](const Array& x) { return sum(take(x, idx, 1, 1)); })(a);
  });
  // Each pick adds 1 to its row of its own batch element (index 1 twice).
  std::vector<float> want(24, 0.0f);
  for (int c = 0; c < 3; ++c) {
    want[static_cast<std::size_t>(0 * 12 + 0 * 3 + c)] += 1;
    want[static_cast<std::size_t>(0 * 12 + 3 * 3 + c)] += 1;
    want[static_cast<std::size_t>(1 * 12 + 1 * 3 + c)] += 2;
  }
  CHECK(g(a, i1).to_vector<float>() == want);
}

TEST_CASE("take with batch_dims names the op, the argument and the shapes in its errors") {
  const Array a = zeros({2, 3, 4});
  CHECK_THROWS_WITH_AS(
      take(a, zeros({3, 5}, i32), 2, 1),
      "[take] the first 1 axes (batch_dims) of the array of shape (2, 3, 4) and of the "
      "indices of shape (3, 5) must be equal (axis 0: 2 vs 3)",
      ShapeError);
  CHECK_THROWS_WITH_AS(take(a, zeros({2, 5}), 2, 1),
                       "[take] indices must be i32 or u32, got f32 indices of shape (2, 5)",
                       DTypeError);
  CHECK_THROWS_WITH_AS(
      take(a, zeros({2, 3}, i32), 1, 2),
      "[take] axis 1 must not be one of the 2 batch axes (batch_dims 2): the axis taken "
      "from comes after them",
      ShapeError);
  CHECK_THROWS_WITH_AS(take(a, zeros({2, 3}, i32), 2, 3),
                       "[take] batch_dims 3 is out of range for indices of shape (2, 3) (rank 2)",
                       ShapeError);
  CHECK_THROWS_WITH_AS(take(a, zeros({2, 3}, i32), 2, -3),
                       "[take] batch_dims -3 is out of range for indices of shape (2, 3) (rank 2)",
                       ShapeError);
  CHECK_THROWS_WITH_AS(take(a, zeros({2, 3}, i32), 3, 1),
                       "[take] axis 3 is out of range for an array of rank 3", ShapeError);
  CHECK_THROWS_WITH_AS(take(Array(), zeros({2, 3}, i32), 2, 1),
                       doctest::Contains("[take] the array input is None"), ValueError);
  // An index past its axis is an error, not a read from the next batch element.
  CHECK_THROWS_WITH_AS(take(a, array<I>({0, 4}, {2, 1}), 2, 1),
                       doctest::Contains("index 4 is out of range for axis 2 of size 4"),
                       IndexError);
}
