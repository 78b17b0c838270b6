// unfold and fold (im2col / col2im) on the default device against plain loops
// written from their definition (dsl/ops.hpp), over generated geometries: 1-,
// 2- and 3-axis windows with every stride, dilation and (asymmetric) padding
// from small sets, f32 and i32. fold sums each image element's taps in tap
// order, so f32 results are compared bit for bit. Then: fold is unfold's
// transpose (<unfold(x), c> == <x, fold(c)>), the CPU kernels give the same
// bits at every thread count, and bad arguments are errors naming the op.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <cstdint>
#include <kiln/kiln.hpp>
#include <random>
#include <string>
#include <vector>

#include "error_text.hpp"
#include "kiln/runtime/strings.hpp"
#include "thread_counts.hpp"

using namespace kiln;

namespace {

struct Geometry {
  Shape lead, spatial;
  Window window;
  std::string label() const {
    std::vector<std::string> pads;
    for (const auto& p : window.padding) pads.push_back(detail::str_cat(p[0], "/", p[1]));
    return detail::str_cat("lead ", to_string(lead), " image ", to_string(spatial), " window ",
                           to_string(window.size), " strides ", to_string(window.strides),
                           " dilation ", to_string(window.dilation), " padding ",
                           detail::join(pads, ","));
  }
};

// Output extent per axis, or -1 when the dilated window does not fit.
Shape extents(const Geometry& g) {
  Shape o;
  for (std::size_t a = 0; a < g.spatial.size(); ++a) {
    const std::int64_t padded = g.spatial[a] + g.window.padding[a][0] + g.window.padding[a][1];
    const std::int64_t span = g.window.dilation[a] * (g.window.size[a] - 1) + 1;
    o.push_back(padded < span ? -1 : (padded - span) / g.window.strides[a] + 1);
  }
  return o;
}

// Row-major index decomposition of i over `dims`.
Shape unravel(std::int64_t i, const Shape& dims) {
  Shape idx(dims.size());
  for (std::size_t a = dims.size(); a-- > 0;) {
    idx[a] = i % dims[a];
    i /= dims[a];
  }
  return idx;
}

// For each (tap, position): the image element it reads, or -1 in the padding.
std::vector<std::int64_t> sources(const Geometry& g) {
  const Shape o = extents(g);
  const std::int64_t taps = numel(g.window.size), positions = numel(o);
  std::vector<std::int64_t> src;
  for (std::int64_t t = 0; t < taps; ++t) {
    const Shape k = unravel(t, g.window.size);
    for (std::int64_t l = 0; l < positions; ++l) {
      const Shape p = unravel(l, o);
      std::int64_t at = 0;
      bool inside = true;
      for (std::size_t a = 0; a < o.size(); ++a) {
        const std::int64_t i = p[a] * g.window.strides[a] + k[a] * g.window.dilation[a] -
                               g.window.padding[a][0];
        inside = inside && i >= 0 && i < g.spatial[a];
        at = at * g.spatial[a] + i;
      }
      src.push_back(inside ? at : -1);
    }
  }
  return src;
}

template <class T>
std::vector<T> unfold_loops(const std::vector<T>& x, const Geometry& g, T pad) {
  const std::vector<std::int64_t> src = sources(g);
  const std::int64_t planes = numel(g.lead), image = numel(g.spatial);
  std::vector<T> out;
  for (std::int64_t p = 0; p < planes; ++p) {
    for (const std::int64_t s : src) out.push_back(s < 0 ? pad : x[static_cast<std::size_t>(p * image + s)]);
  }
  return out;
}

template <class T>
std::vector<T> fold_loops(const std::vector<T>& cols, const Geometry& g) {
  const std::vector<std::int64_t> src = sources(g);
  const std::int64_t planes = numel(g.lead), image = numel(g.spatial);
  const auto per = static_cast<std::int64_t>(src.size());
  std::vector<T> out(static_cast<std::size_t>(planes * image), T{0});
  for (std::int64_t p = 0; p < planes; ++p) {
    // src is in (tap, position) order: each element gets its taps in tap order.
    for (std::int64_t i = 0; i < per; ++i) {
      const std::int64_t s = src[static_cast<std::size_t>(i)];
      if (s >= 0) {
        T& e = out[static_cast<std::size_t>(p * image + s)];
        e = static_cast<T>(e + cols[static_cast<std::size_t>(p * per + i)]);
      }
    }
  }
  return out;
}

Shape with(const Shape& a, const Shape& b) {
  Shape s = a;
  s.insert(s.end(), b.begin(), b.end());
  return s;
}

// Geometries: every combination of per-axis options from small sets, for 1-,
// 2- and 3-axis windows (3-axis ones sampled), skipping those that do not fit.
std::vector<Geometry> geometries() {
  struct Axis {
    std::int64_t extent, size, stride, dilation, lo, hi;
  };
  std::vector<Axis> axes;
  for (std::int64_t extent : {1, 5, 8}) {
    for (std::int64_t size : {1, 2, 3}) {
      for (std::int64_t stride : {1, 2, 3}) {
        for (std::int64_t dilation : {1, 2}) {
          for (auto [lo, hi] : {std::pair<std::int64_t, std::int64_t>{0, 0}, {1, 1}, {2, 0}}) {
            axes.push_back({extent, size, stride, dilation, lo, hi});
          }
        }
      }
    }
  }
  std::vector<Geometry> out;
  const auto add = [&](const std::vector<Axis>& per, Shape lead) {
    Shape spatial;
    Window w;
    for (const Axis& a : per) {
      spatial.push_back(a.extent);
      w.size.push_back(a.size);
      w.strides.push_back(a.stride);
      w.dilation.push_back(a.dilation);
      w.padding.push_back({a.lo, a.hi});
    }
    // Built whole: GCC 12 at -O1 (the sanitizer build) misreads member-wise
    // assignment of a default-constructed Geometry as a use before init.
    Geometry g{std::move(lead), std::move(spatial), std::move(w)};
    for (std::int64_t e : extents(g)) {
      if (e < 1) return;
    }
    out.push_back(std::move(g));
  };
  for (const Axis& a : axes) add({a}, {3});
  std::mt19937 gen(7);
  for (int i = 0; i < 150; ++i) {
    add({axes[gen() % axes.size()], axes[gen() % axes.size()]}, {2, 3});
  }
  for (int i = 0; i < 30; ++i) {
    add({axes[gen() % axes.size()], axes[gen() % axes.size()], axes[gen() % axes.size()]}, {2});
  }
  return out;
}

std::vector<float> floats(std::size_t n, std::mt19937& gen) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = u(gen);
  return v;
}

}  // namespace

TEST_CASE("unfold and fold equal plain loops over 1-, 2- and 3-axis windows, f32 bit for bit and i32") {
  std::mt19937 gen(3);
  const std::vector<Geometry> all = geometries();
  CHECK(all.size() > 200);
  for (const Geometry& g : all) {
    INFO(g.label());
    const Shape image_shape = with(g.lead, g.spatial);
    const Shape cols_shape = with(g.lead, {numel(g.window.size), numel(extents(g))});
    const std::vector<float> x = floats(static_cast<std::size_t>(numel(image_shape)), gen);
    const Array xa = to_device(Array::from_data<float>(x, image_shape), default_device());
    const Array u = unfold(xa, g.window, -2.5);
    CHECK(u.shape() == cols_shape);
    CHECK(u.to_vector<float>() == unfold_loops<float>(x, g, -2.5f));

    const std::vector<float> c = floats(static_cast<std::size_t>(numel(cols_shape)), gen);
    const Array f = fold(to_device(Array::from_data<float>(c, cols_shape), default_device()), g.spatial,
                         g.window);
    CHECK(f.shape() == image_shape);
    CHECK(f.to_vector<float>() == fold_loops<float>(c, g));

    std::vector<std::int32_t> xi(x.size()), ci(c.size());
    for (std::size_t i = 0; i < x.size(); ++i) xi[i] = static_cast<std::int32_t>(x[i] * 100);
    for (std::size_t i = 0; i < c.size(); ++i) ci[i] = static_cast<std::int32_t>(c[i] * 100);
    CHECK(unfold(to_device(Array::from_data<std::int32_t>(xi, image_shape), default_device()), g.window, 7)
              .to_vector<std::int32_t>() == unfold_loops<std::int32_t>(xi, g, 7));
    CHECK(fold(to_device(Array::from_data<std::int32_t>(ci, cols_shape), default_device()), g.spatial,
               g.window)
              .to_vector<std::int32_t>() == fold_loops<std::int32_t>(ci, g));
  }
}

TEST_CASE("unfold moves f16, bf16 and f64 elements as they are; pads round as a cast would") {
  std::mt19937 gen(4);
  const std::vector<Geometry> all = geometries();
  for (std::size_t i = 0; i < all.size(); i += 3) {
    const Geometry& g = all[i];
    INFO(g.label());
    const Shape image_shape = with(g.lead, g.spatial);
    const Array x = to_device(Array::from_data<float>(
                                  floats(static_cast<std::size_t>(numel(image_shape)), gen), image_shape),
                              default_device());
    for (const DType dt : {f16, bf16, f64}) {
      INFO(name(dt));
      for (const double pad : {-std::numeric_limits<double>::infinity(), 0.1, 0.0}) {
        INFO("pad " << pad);
        const Array xd = astype(x, dt);
        const Array u = unfold(xd, g.window, pad);
        CHECK(u.dtype() == dt);
        // The reference: the same values in f32 (f64: themselves) through the
        // plain loops, with the pad cast to dt first.
        const Array pad_dt = astype(full({}, pad, f64), dt);
        if (dt == f64) {
          CHECK(u.to_vector<double>() ==
                unfold_loops<double>(xd.to_vector<double>(), g, pad_dt.item<double>()));
        } else {
          CHECK(astype(u, f32).to_vector<float>() ==
                unfold_loops<float>(astype(xd, f32).to_vector<float>(), g,
                                    astype(pad_dt, f32).item<float>()));
        }
      }
    }
  }
}

TEST_CASE("fold is unfold's transpose: <unfold(x), c> == <x, fold(c)> (f64)") {
  std::mt19937 gen(5);
  for (const Geometry& g : geometries()) {
    INFO(g.label());
    const Shape image_shape = with(g.lead, g.spatial);
    const Shape cols_shape = with(g.lead, {numel(g.window.size), numel(extents(g))});
    const auto f64_array = [&](const Shape& shape) {
      const std::vector<float> v = floats(static_cast<std::size_t>(numel(shape)), gen);
      return to_device(astype(Array::from_data<float>(v, shape), f64), default_device());
    };
    const Array x = f64_array(image_shape);
    const Array c = f64_array(cols_shape);
    const double lhs = sum(unfold(x, g.window) * c).item<double>();
    const double rhs = sum(x * fold(c, g.spatial, g.window)).item<double>();
    CHECK(lhs == doctest::Approx(rhs).epsilon(1e-12));
  }
}

TEST_CASE("unfold and fold give the same bits at 1, 2, 3 and 7 threads (CPU)") {
  if (!threads_test::on_cpu()) return;
  int prims = 0;
  std::mt19937 gen(9);
  // Big enough to be split over the pool: (64, 32) images of 30x30, 3x3 taps.
  const Shape image{64, 32, 30, 30};
  const Window w{.size = {3, 3}, .strides = {1, 2}, .padding = {{1, 1}, {0, 2}}};
  const Array x = Array::from_data<float>(floats(static_cast<std::size_t>(numel(image)), gen), image);
  const Array cols = unfold(x, w);
  for (const PrimInfo& info : all_prims()) {
    if (info.family != PrimFamily::kWindow) continue;
    ++prims;
    switch (info.prim) {
      case Prim::kUnfold:
        threads_test::same_at_every_thread_count("unfold", [&] { return unfold(x, w, 0.5); });
        break;
      case Prim::kFold: {
        const Array c = Array::from_data<float>(
            floats(static_cast<std::size_t>(cols.size()), gen), cols.shape());
        threads_test::same_at_every_thread_count("fold", [&] { return fold(c, {30, 30}, w); });
        break;
      }
      default:
        FAIL("no thread-count case for ", info.name, "; add one here");
    }
  }
  CHECK(prims == 2);
}

TEST_CASE("unfold and fold errors name the op and the offending values") {
  using testing::error_text;
  const Array x = ones({2, 3, 5, 5});
  CHECK(error_text([&] { unfold(x, {.size = {}}); }) == "[unfold] the window has no axes");
  CHECK(error_text([&] { unfold(ones({4}), {.size = {2, 2}}); }) ==
        "[unfold] a 2-axis window needs an input of rank >= 2, got shape (4,)");
  CHECK(error_text([&] { unfold(x, {.size = {2, 2}, .strides = {1}}); }) ==
        "[unfold] strides (1,) has 1 values for a 2-axis window");
  CHECK(error_text([&] { unfold(x, {.size = {2, 0}}); }) ==
        "[unfold] window size must be >= 1 on every axis, got (2, 0)");
  CHECK(error_text([&] { unfold(x, {.size = {2, 2}, .padding = {{0, 0}, {-1, 0}}}); }) ==
        "[unfold] padding must be >= 0, got (-1, 0) on spatial axis 1");
  CHECK(error_text([&] { unfold(x, {.size = {3, 6}}); }) ==
        "[unfold] the (padded) input extent 5 is smaller than the dilated kernel extent 6 on "
        "spatial axis 1");
  CHECK(error_text([&] {
          unfold(ones({2, 2}, i32), {.size = {2}}, -std::numeric_limits<double>::infinity());
        }) == "[unfold] pad value -inf for an input of dtype i32: only floating inputs take "
           "infinities or NaN");
  CHECK(error_text([&] { fold(ones({2, 4, 15}), {5, 5}, {.size = {2, 2}}); }) ==
        "[fold] columns of shape (2, 4, 15) for window (2, 2) over an image of (5, 5): expected "
        "(..., 4, 16)");
  CHECK(error_text([&] { fold(ones({4, 16}) > 0.0, {5, 5}, {.size = {2, 2}}); }) ==
        "[fold] sums columns: bool has no sum (convert to a numeric dtype)");
  CHECK(error_text([&] { fold(ones({4, 16}), {5}, {.size = {2, 2}}); }) ==
        "[fold] image extents (5,) for a 2-axis window");
  CHECK(error_text([&] { fold(ones({4, 16}), {5, -1}, {.size = {2, 2}}); }) ==
        "[fold] image extents must be >= 0, got (5, -1)");
}
