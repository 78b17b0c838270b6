// Reductions split over the thread pool (issue 20, item 3) give the same bits
// at 1, 2, 3 and 7 threads, and the values a plain loop gives. The reduction
// primitives are enumerated from the primitive table (all_prims()), so one
// added to the family fails here until it has a reference. Inputs are large
// (past the pool's 128k-element threshold) with odd extents, reduced over
// inner, outer and middle axes, several axes, and everything. CPU only.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <kiln/kiln.hpp>
#include <random>
#include <string>
#include <vector>

#include "kiln/runtime/strings.hpp"
#include "thread_counts.hpp"

using namespace kiln;
using namespace kiln::threads_test;

namespace {

std::uint32_t g_seed = 20;

Array uniform(const Shape& shape, double lo, double hi, DType dtype = f32) {
  std::mt19937 g(g_seed++);
  std::uniform_real_distribution<double> u(lo, hi);
  const auto n = static_cast<std::size_t>(numel(shape));
  if (dtype == i32) {
    std::vector<std::int32_t> v(n);
    for (auto& x : v) x = static_cast<std::int32_t>(std::floor(u(g)));
    return Array::from_data<std::int32_t>(v, shape);
  }
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(u(g));
  return Array::from_data<float>(v, shape);
}

Shape without(const Shape& shape, const Axes& axes) {
  Shape out;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (std::find(axes.begin(), axes.end(), static_cast<std::int64_t>(d)) ==
        axes.end()) {
      out.push_back(shape[d]);
    }
  }
  return out;
}

// Position in the reduced output of each input element (row-major).
std::vector<std::size_t> output_index(const Shape& shape, const Axes& axes) {
  const auto n = static_cast<std::size_t>(numel(shape));
  std::vector<std::size_t> out(n);
  std::vector<std::int64_t> pos(shape.size(), 0);
  for (std::size_t i = 0; i < n; ++i) {
    std::size_t k = 0;
    for (std::size_t d = 0; d < shape.size(); ++d) {
      if (std::find(axes.begin(), axes.end(), static_cast<std::int64_t>(d)) ==
          axes.end()) {
        k = k * static_cast<std::size_t>(shape[d]) +
            static_cast<std::size_t>(pos[d]);
      }
    }
    out[i] = k;
    for (std::size_t d = shape.size(); d-- > 0;) {
      if (++pos[d] < shape[d]) break;
      pos[d] = 0;
    }
  }
  return out;
}

// The reduction `p` of x over `axes` by a plain loop, in double for floats
// (i32 sums and products wrap, as kiln's).
std::vector<double> reference_reduce(Prim p, const Array& x, const Axes& axes) {
  const std::vector<std::size_t> at = output_index(x.shape(), axes);
  const auto m = static_cast<std::size_t>(numel(without(x.shape(), axes)));
  const bool ints = x.dtype() == i32;
  std::vector<double> v;
  if (ints) {
    for (const auto e : x.to_vector<std::int32_t>()) v.push_back(e);
  } else {
    for (const auto e : x.to_vector<float>()) v.push_back(e);
  }
  std::vector<double> out(m);
  std::vector<std::uint32_t> wrapped(m);
  std::vector<bool> seen(m, false);
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::size_t k = at[i];
    const auto w = static_cast<std::uint32_t>(static_cast<std::int64_t>(v[i]));
    if (!seen[k]) {
      seen[k] = true;
      out[k] = v[i];
      wrapped[k] = w;
      continue;
    }
    switch (p) {
      case Prim::kSum:
        out[k] += v[i];
        wrapped[k] += w;
        break;
      case Prim::kProd:
        out[k] *= v[i];
        wrapped[k] *= w;
        break;
      case Prim::kMax:
        out[k] = std::max(out[k], v[i]);
        break;
      case Prim::kMin:
        out[k] = std::min(out[k], v[i]);
        break;
      default:
        FAIL("reference_reduce: no reference for ", name(p), "; add one here");
    }
  }
  if (ints && (p == Prim::kSum || p == Prim::kProd)) {
    for (std::size_t k = 0; k < m; ++k)
      out[k] = static_cast<std::int32_t>(wrapped[k]);
  }
  return out;
}

std::vector<double> as_doubles(const Array& a) {
  std::vector<double> out;
  if (a.dtype() == i32) {
    for (const auto e : a.to_vector<std::int32_t>()) out.push_back(e);
  } else {
    for (const auto e : a.to_vector<float>()) out.push_back(e);
  }
  return out;
}

struct ReduceCase {
  Shape shape;
  Axes axes;
  const char* what;
};

// Past the 128k-element threshold, odd extents: the kernels' every split.
const ReduceCase kReduceCases[] = {
    {{2053, 523}, {1}, "inner axis (many rows)"},
    {{2053, 523}, {0}, "outer axis (pieces of rows)"},
    {{5, 70001}, {0}, "outer axis of wide rows (column blocks)"},
    {{37, 301, 29}, {1}, "middle axis"},
    {{3, 20000, 7}, {1}, "middle axis, narrow (pieces of rows)"},
    {{65, 73, 81}, {0, 2}, "two separate axes"},
    {{3, 100003}, {1}, "a few long rows (fixed pieces)"},
    {{(1 << 20) + 37}, {0}, "everything, 1-D (fixed pieces)"},
    {{61, 67, 71}, {0, 1, 2}, "everything, 3-D"},
};

// Values whose float sums and products are exact whatever the order (every
// partial result representable): quarter-integers for sums, max and min; for
// products, signs with a few powers of two. A plain loop's result is then the
// one right answer, bit for bit.
Array exact_values(Prim p, const Shape& shape, DType dtype) {
  std::mt19937 g(g_seed++);
  const auto n = static_cast<std::size_t>(numel(shape));
  if (dtype == i32) {
    std::vector<std::int32_t> v(n);
    for (auto& x : v)
      x = static_cast<std::int32_t>(g() % 201) - 100;  // wrapping products
    return Array::from_data<std::int32_t>(v, shape);
  }
  std::vector<float> v(n);
  for (auto& x : v) {
    const std::uint32_t r = g();
    if (p == Prim::kProd) {
      x = (r & 1 ? -1.0f : 1.0f) * (r % 1000 == 2   ? 2.0f
                                    : r % 1000 == 4 ? 0.5f
                                                    : 1.0f);
    } else {
      x = static_cast<float>(static_cast<int>(r % 801) - 400) * 0.25f;
    }
  }
  return Array::from_data<float>(v, shape);
}

}  // namespace

TEST_CASE(
    "every reduction primitive gives the same bits at 1, 2, 3 and 7 threads, "
    "and a plain loop's values") {
  if (!on_cpu()) return;
  int prims = 0;
  for (const PrimInfo& info : all_prims()) {
    if (info.family != PrimFamily::kReduce) continue;
    ++prims;
    const Prim p = info.prim;
    for (const DType dtype : {f32, i32}) {
      for (const ReduceCase& c : kReduceCases) {
        const Aval out{dtype, without(c.shape, c.axes)};
        const auto reduce = [&](const Array& x) {
          const Array in[] = {x};
          return detail::bind(p, Params(ReduceParams{c.axes, false}), in, out);
        };
        const std::string label =
            detail::str_cat(info.name, " ", name(dtype), " over ", c.what);
        // Rounding data (f32): the order of the float operations shows in the
        // bits.
        if (dtype == f32) {
          const Array x = p == Prim::kProd ? uniform(c.shape, 0.9999, 1.0001)
                                           : uniform(c.shape, -100, 100);
          same_at_every_thread_count(label, [&] { return reduce(x); });
        }
        const Array x = exact_values(p, c.shape, dtype);
        const Array got = same_at_every_thread_count(label + " (exact values)",
                                                     [&] { return reduce(x); });
        INFO(label);
        CHECK(as_doubles(got) == reference_reduce(p, x, c.axes));
      }
    }
  }
  CHECK(prims >= 4);  // sum, max, min, prod at least
}

TEST_CASE(
    "argmax and argmin give the first extreme at every thread count, across "
    "fixed pieces and with NaN") {
  if (!on_cpu()) return;
  // Few distinct values: each extreme repeats in many rows, pieces and columns,
  // so only the first occurrence is right.
  const auto repeating = [](const Shape& shape) {
    std::vector<float> v(static_cast<std::size_t>(numel(shape)));
    for (std::size_t i = 0; i < v.size(); ++i)
      v[i] = static_cast<float>((i * 7919) % 1000);
    return v;
  };
  struct Case {
    Shape shape;
    std::int64_t axis;
    bool nan;
  };
  const Case cases[] = {
      {{2053, 523}, 1, false},      {{2053, 523}, 0, false},
      {{5, 70001}, 0, false},       {{3, 20000, 7}, 1, true},
      {{37, 301, 29}, 1, false},    {{3, 100003}, 1, false},
      {{(1 << 20) + 37}, 0, false}, {{(1 << 20) + 37}, 0, true},
      {{3, 100003}, 1, true}};
  for (const PrimInfo& info : all_prims()) {
    if (info.family != PrimFamily::kArgReduce) continue;
    const bool is_max = info.prim == Prim::kArgmax;
    REQUIRE_MESSAGE((is_max || info.prim == Prim::kArgmin), "no reference for ",
                    info.name);
    for (const Case& c : cases) {
      std::vector<float> v = repeating(c.shape);
      if (c.nan) {  // NaN in a late piece wins over everything before and after
        v[v.size() - 70000] = NAN;
        v[v.size() - 3] = NAN;
      }
      const Array x = Array::from_data<float>(v, c.shape);
      Shape out_shape = c.shape;
      out_shape.erase(out_shape.begin() + c.axis);
      const std::string label =
          detail::str_cat(info.name, " (", detail::join(c.shape, ","),
                          ") axis ", c.axis, c.nan ? " with NaN" : "");
      const Array got = same_at_every_thread_count(label, [&] {
        const Array in[] = {x};
        return detail::bind(info.prim, Params(ArgReduceParams{c.axis, false}),
                            in, Aval{i32, out_shape});
      });
      // A plain scan: first NaN, else first extreme.
      std::int64_t outer = 1, inner = 1;
      for (std::int64_t d = 0; d < c.axis; ++d)
        outer *= c.shape[static_cast<std::size_t>(d)];
      for (std::size_t d = static_cast<std::size_t>(c.axis) + 1;
           d < c.shape.size(); ++d)
        inner *= c.shape[d];
      const std::int64_t n = c.shape[static_cast<std::size_t>(c.axis)];
      std::vector<std::int32_t> want;
      for (std::int64_t o = 0; o < outer; ++o) {
        for (std::int64_t i = 0; i < inner; ++i) {
          std::int32_t best = 0;
          for (std::int64_t k = 1; k < n; ++k) {
            const float b =
                v[static_cast<std::size_t>((o * n + best) * inner + i)];
            const float y =
                v[static_cast<std::size_t>((o * n + k) * inner + i)];
            if (!std::isnan(b) && (std::isnan(y) || (is_max ? y > b : y < b)))
              best = static_cast<std::int32_t>(k);
          }
          want.push_back(best);
        }
      }
      INFO(label);
      CHECK(got.to_vector<std::int32_t>() == want);
    }
  }
}
