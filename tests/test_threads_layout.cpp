// Layout primitives, gathers and scatters split over the thread pool (issue
// 20, item 3) give the same bits at 1, 2, 3 and 7 threads, and the values a
// plain loop gives; scatter_add sums repeated indices in index order at every
// thread count. The layout and index families are enumerated from the
// primitive table (all_prims()): a primitive added to them fails here until it
// has a case. CPU only.
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

std::uint32_t g_seed = 40;

}  // namespace

namespace {

// 0, 1, 2, ... as f32 (exact below 2^24): every element distinct.
std::vector<float> ramp_values(const Shape& shape) {
  std::vector<float> v(static_cast<std::size_t>(numel(shape)));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  return v;
}

Shape strides_of(const Shape& shape) {
  Shape s(shape.size(), 1);
  for (std::size_t d = shape.size(); d-- > 1;) s[d - 1] = s[d] * shape[d];
  return s;
}

// out (contiguous, `shape`)[i...] = in[offset + sum i[d] * strides[d]], by
// plain division per element: the reference for transpose, slice and
// broadcast_to.
std::vector<float> strided(const std::vector<float>& in, const Shape& shape,
                           const Shape& strides, std::int64_t offset = 0) {
  std::vector<float> out(static_cast<std::size_t>(numel(shape)));
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::int64_t at = offset;
    auto rest = static_cast<std::int64_t>(i);
    for (std::size_t d = shape.size(); d-- > 0;) {
      at += rest % shape[d] * strides[d];
      rest /= shape[d];
    }
    out[i] = in[static_cast<std::size_t>(at)];
  }
  return out;
}

struct LayoutCase {
  std::string label;
  std::function<Array()> op;
  std::vector<float> want;
};

std::vector<LayoutCase> layout_cases(Prim p) {
  std::vector<LayoutCase> cases;
  switch (p) {
    case Prim::kReshape: {
      const Shape s{2053, 523};
      const Array x = Array::from_data<float>(ramp_values(s), s);
      cases.push_back({"reshape",
                       [x] {
                         return reshape(x, {523, 2053});
                       },
                       ramp_values(s)});
      break;
    }
    case Prim::kTranspose: {
      const Shape s2{1031, 2053};
      const Array x2 = Array::from_data<float>(ramp_values(s2), s2);
      cases.push_back({"transpose (1031,2053)", [x2] { return transpose(x2); },
                       strided(ramp_values(s2), {2053, 1031}, {1, 2053})});
      const Shape s3{33, 129, 65};
      const Array x3 = Array::from_data<float>(ramp_values(s3), s3);
      const Shape st = strides_of(s3);
      for (const Axes& perm :
           {Axes{0, 2, 1}, Axes{2, 0, 1}, Axes{1, 0, 2}, Axes{2, 1, 0}}) {
        Shape shape, strides;
        for (const std::int64_t a : perm) {
          shape.push_back(s3[static_cast<std::size_t>(a)]);
          strides.push_back(st[static_cast<std::size_t>(a)]);
        }
        cases.push_back(
            {"transpose (33,129,65) by (" + detail::join(perm, ",") + ")",
             [x3, perm] { return transpose(x3, perm); },
             strided(ramp_values(s3), shape, strides)});
      }
      break;
    }
    case Prim::kBroadcastTo: {
      const Array row =
          Array::from_data<float>(ramp_values({1, 1031}), {1, 1031});
      cases.push_back({"broadcast_to a row",
                       [row] {
                         return broadcast_to(row, {1024, 1031});
                       },
                       strided(ramp_values({1031}), {1024, 1031}, {0, 1})});
      const Array col =
          Array::from_data<float>(ramp_values({1031, 1}), {1031, 1});
      cases.push_back({"broadcast_to a column",
                       [col] {
                         return broadcast_to(col, {1031, 1024});
                       },
                       strided(ramp_values({1031}), {1031, 1024}, {1, 0})});
      const Array one = Array::from_data<float>(std::vector<float>{7.5f}, {1});
      cases.push_back({"broadcast_to one long row",
                       [one] { return broadcast_to(one, {300001}); },
                       std::vector<float>(300001, 7.5f)});
      const Array mid =
          Array::from_data<float>(ramp_values({7, 1, 33}), {7, 1, 33});
      cases.push_back(
          {"broadcast_to a middle dim",
           [mid] {
             return broadcast_to(mid, {3, 7, 1200, 33});
           },
           strided(ramp_values({7, 33}), {3, 7, 1200, 33}, {0, 33, 0, 1})});
      break;
    }
    case Prim::kSlice: {
      const Shape s{2049, 1031};
      const Array x = Array::from_data<float>(ramp_values(s), s);
      cases.push_back(
          {"slice with steps",
           [x] {
             return slice(x, {1, 3}, {2049, 1031}, {2, 3});
           },
           strided(ramp_values(s), {1024, 343}, {2 * 1031, 3}, 1031 + 3)});
      const Shape s1{(1 << 20) + 37};
      const Array x1 = Array::from_data<float>(ramp_values(s1), s1);
      cases.push_back(
          {"slice one long row",
           [x1] { return slice(x1, {5}, {(1 << 20) + 37}, {2}); },
           strided(ramp_values(s1), {((1 << 20) + 32) / 2}, {2}, 5)});
      break;
    }
    case Prim::kConcatenate: {
      const auto joined = [](const std::vector<Shape>& shapes,
                             std::int64_t axis) {
        std::vector<Array> parts;
        float base = 0;
        std::int64_t outer = 1;
        for (std::int64_t d = 0; d < axis; ++d)
          outer *= shapes[0][static_cast<std::size_t>(d)];
        std::vector<std::vector<float>> values;
        for (const Shape& s : shapes) {
          std::vector<float> v = ramp_values(s);
          for (float& e : v) e += base;
          base += static_cast<float>(v.size());
          parts.push_back(Array::from_data<float>(v, s));
          values.push_back(std::move(v));
        }
        std::vector<float> want;
        for (std::int64_t o = 0; o < outer; ++o) {
          for (const auto& v : values) {
            const auto w = static_cast<std::int64_t>(v.size()) / outer;
            want.insert(want.end(), v.begin() + o * w, v.begin() + (o + 1) * w);
          }
        }
        return LayoutCase{"concatenate axis " + std::to_string(axis) + " of " +
                              std::to_string(shapes.size()),
                          [parts, axis] { return concatenate(parts, axis); },
                          want};
      };
      cases.push_back(joined({{1024, 517}, {1024, 300}, {1024, 1}}, 1));
      cases.push_back(
          joined({{40000}, {70001}, {30000}}, 0));  // bands across pieces
      cases.push_back(joined({{5, 20000, 3}, {5, 1, 3}, {5, 7001, 3}}, 1));
      cases.push_back(joined({{300, 517}, {211, 517}}, 0));
      break;
    }
    default:
      FAIL("layout_cases: no case for ", name(p), "; add one here");
  }
  return cases;
}

}  // namespace

TEST_CASE(
    "every layout primitive gives the same bits at 1, 2, 3 and 7 threads, and "
    "a plain loop's values") {
  if (!on_cpu()) return;
  int prims = 0;
  for (const PrimInfo& info : all_prims()) {
    if (info.family != PrimFamily::kLayout) continue;
    ++prims;
    for (const LayoutCase& c : layout_cases(info.prim)) {
      const Array got = same_at_every_thread_count(c.label, c.op);
      INFO(c.label);
      CHECK(got.to_vector<float>() == c.want);
    }
  }
  CHECK(prims >= 5);
}

namespace {

Array index_array(std::size_t n, std::uint32_t bound) {
  std::mt19937 g(g_seed++);
  std::vector<std::int32_t> v(n);
  for (auto& x : v) x = static_cast<std::int32_t>(g() % bound);
  return Array::from_data<std::int32_t>(v, {static_cast<std::int64_t>(n)});
}

// Floats of mixed magnitudes: sums of them depend on the order of the adds.
Array mixed(const Shape& shape) {
  std::mt19937 g(g_seed++);
  std::vector<float> v(static_cast<std::size_t>(numel(shape)));
  for (auto& x : v)
    x = std::ldexp(static_cast<float>(g() % 2001) - 1000.0f,
                   static_cast<int>(g() % 40) - 20);
  return Array::from_data<float>(v, shape);
}

// The scatters by plain loops, each (row, column) updated in k order as the
// kernels promise: scatter_add's rounding is then the same, bit for bit.
// `per_element`: indices shaped like the updates (scatter_add_along_axis).
std::vector<float> scatter_reference(const Array& a, const Array& indices,
                                     const Array& updates, std::int64_t axis,
                                     bool add, bool per_element) {
  std::vector<float> out = a.to_vector<float>();
  const std::vector<std::int32_t> idx = indices.to_vector<std::int32_t>();
  const std::vector<float> upd = updates.to_vector<float>();
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t d = 0; d < axis; ++d)
    outer *= a.shape()[static_cast<std::size_t>(d)];
  for (std::size_t d = static_cast<std::size_t>(axis) + 1; d < a.shape().size();
       ++d)
    inner *= a.shape()[d];
  const std::int64_t n = a.shape()[static_cast<std::size_t>(axis)];
  const std::int64_t ks = updates.size() / (outer * inner);
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t k = 0; k < ks; ++k) {
      for (std::int64_t q = 0; q < inner; ++q) {
        const auto u = static_cast<std::size_t>((o * ks + k) * inner + q);
        const std::int64_t i =
            per_element ? idx[u] : idx[static_cast<std::size_t>(k)];
        float& slot = out[static_cast<std::size_t>((o * n + i) * inner + q)];
        slot = add ? slot + upd[u] : upd[u];
      }
    }
  }
  return out;
}

}  // namespace

TEST_CASE(
    "gathers and scatters give the same bits at 1, 2, 3 and 7 threads; "
    "repeated scatter_add indices sum in index order") {
  if (!on_cpu()) return;
  const Shape s{2053, 523};
  const std::vector<float> xv = ramp_values(s);
  const Array x = Array::from_data<float>(xv, s);
  int prims = 0;
  for (const PrimInfo& info : all_prims()) {
    if (info.family != PrimFamily::kIndex) continue;
    ++prims;
    switch (info.prim) {
      case Prim::kTake: {
        for (const std::int64_t axis : {0, 1}) {
          const Array idx = index_array(
              axis == 0 ? 1500 : 700,
              static_cast<std::uint32_t>(s[static_cast<std::size_t>(axis)]));
          const std::vector<std::int32_t> iv = idx.to_vector<std::int32_t>();
          const Array got =
              same_at_every_thread_count("take axis " + std::to_string(axis),
                                         [&] { return take(x, idx, axis); });
          std::vector<float> want;
          for (std::int64_t r = 0;
               r < (axis == 0 ? static_cast<std::int64_t>(iv.size()) : s[0]);
               ++r) {
            for (std::int64_t c = 0;
                 c < (axis == 0 ? s[1] : static_cast<std::int64_t>(iv.size()));
                 ++c) {
              const std::int64_t i =
                  axis == 0 ? iv[static_cast<std::size_t>(r)] * s[1] + c
                            : r * s[1] + iv[static_cast<std::size_t>(c)];
              want.push_back(xv[static_cast<std::size_t>(i)]);
            }
          }
          CHECK(got.to_vector<float>() == want);
        }
        break;
      }
      case Prim::kTakeAlongAxis: {
        for (const std::int64_t axis : {0, 1}) {
          const Shape is = axis == 0 ? Shape{800, 523} : Shape{2053, 300};
          const Array idx =
              reshape(index_array(static_cast<std::size_t>(numel(is)),
                                  static_cast<std::uint32_t>(
                                      s[static_cast<std::size_t>(axis)])),
                      is);
          const std::vector<std::int32_t> iv = idx.to_vector<std::int32_t>();
          const Array got = same_at_every_thread_count(
              "take_along_axis axis " + std::to_string(axis),
              [&] { return take_along_axis(x, idx, axis); });
          std::vector<float> want(iv.size());
          for (std::size_t e = 0; e < iv.size(); ++e) {
            const auto r = static_cast<std::int64_t>(e) / is[1],
                       c = static_cast<std::int64_t>(e) % is[1];
            want[e] = xv[static_cast<std::size_t>(
                axis == 0 ? iv[e] * s[1] + c : r * s[1] + iv[e])];
          }
          CHECK(got.to_vector<float>() == want);
        }
        break;
      }
      case Prim::kOneHot: {
        const Array idx =
            index_array(200003, 12);  // 10 and 11 are out of range: zero rows
        const Array got = same_at_every_thread_count(
            "one_hot", [&] { return one_hot(idx, 10); });
        const std::vector<std::int32_t> iv = idx.to_vector<std::int32_t>();
        std::vector<float> want(iv.size() * 10, 0.0f);
        for (std::size_t r = 0; r < iv.size(); ++r) {
          if (iv[r] < 10) want[r * 10 + static_cast<std::size_t>(iv[r])] = 1.0f;
        }
        CHECK(got.to_vector<float>() == want);
        break;
      }
      case Prim::kScatter:
      case Prim::kScatterAdd: {
        const bool add = info.prim == Prim::kScatterAdd;
        // Updates along axis 0 of narrow rows (split by destination rows; an
        // embedding gradient's shape too), of wide rows (column blocks), and
        // along axis 1 (outer rows). Indices from a few rows (`bound`), so
        // every slot gets many updates, or from all rows.
        struct Scatter {
          Shape shape;
          std::int64_t axis, updates;
          std::uint32_t bound;
        };
        for (const Scatter& c :
             {Scatter{s, 0, 3000, 37}, Scatter{{32771, 64}, 0, 8192, 32771},
              Scatter{{64, 40000}, 0, 100, 37}, Scatter{s, 1, 700, 37}}) {
          const Array base = mixed(c.shape);
          const Array idx =
              index_array(static_cast<std::size_t>(c.updates), c.bound);
          Shape us = c.shape;
          us[static_cast<std::size_t>(c.axis)] = c.updates;
          const Array upd = mixed(us);
          const std::string label = detail::str_cat(
              info.name, " (", detail::join(c.shape, ","), ") axis ", c.axis);
          const Array got = same_at_every_thread_count(label, [&] {
            return add ? scatter_add(base, idx, upd, c.axis)
                       : scatter(base, idx, upd, c.axis);
          });
          INFO(label);
          CHECK(bits(got) ==
                bits(Array::from_data<float>(
                    scatter_reference(base, idx, upd, c.axis, add, false),
                    c.shape)));
        }
        break;
      }
      case Prim::kScatterAddAlongAxis: {
        const Array base = mixed(s);
        for (const std::int64_t axis : {0, 1}) {
          const Shape us = axis == 0 ? Shape{900, 523} : Shape{2053, 400};
          const Array idx =
              reshape(index_array(static_cast<std::size_t>(numel(us)), 29), us);
          const Array upd = mixed(us);
          const std::string label =
              "scatter_add_along_axis axis " + std::to_string(axis);
          const Array got = same_at_every_thread_count(label, [&] {
            return scatter_add_along_axis(base, idx, upd, axis);
          });
          INFO(label);
          CHECK(bits(got) ==
                bits(Array::from_data<float>(
                    scatter_reference(base, idx, upd, axis, true, true), s)));
        }
        break;
      }
      default:
        FAIL("no case for ", info.name, "; add one here");
    }
  }
  CHECK(prims >= 6);
}
