// CPU kernels for the sliding-window primitives: unfold (im2col) and fold
// (col2im). Both walk the same geometry: for one tap of the window, each row
// of output positions (all spatial axes but the last fixed) reads one strided
// run of an image row, bounded where the tap leaves the image for the
// padding. unfold copies those runs (the padding gets the pad value) in one
// pass; fold adds them back into a zeroed image, tap after tap in tap order,
// each image owned by one task, so every element sums the same terms in the
// same order at every thread count (and in the order the Vulkan kernel uses).
#include <algorithm>
#include <cstring>

#include "kiln/backends/cpu/cpu_backend.hpp"
#include "kiln/backends/cpu/parallel.hpp"
#include "kiln/runtime/dtype_inl.hpp"

namespace kiln::cpu {
namespace {

// The geometry of WindowParams over one image: extents and row-major strides
// of the image, the window and the output positions.
struct Geometry {
  std::size_t r = 0;
  Shape img_strides, tap_div, out_div;
  std::int64_t image = 1, taps = 1, positions = 1, rows = 1, width = 1;
  explicit Geometry(const WindowParams& p, const Shape& out_extents) : r(p.window.size()) {
    img_strides = Shape(r, 1);
    tap_div = Shape(r, 1);
    out_div = Shape(r, 1);
    for (std::size_t a = r; a-- > 0;) {
      img_strides[a] = image;
      image *= p.spatial[a];
      tap_div[a] = taps;
      taps *= p.window[a];
      out_div[a] = positions;
      positions *= out_extents[a];
    }
    width = out_extents[r - 1];
    rows = positions / std::max<std::int64_t>(width, 1);
  }
};

Shape output_extents(const WindowParams& p) {
  Shape o;
  for (std::size_t a = 0; a < p.window.size(); ++a) {
    const std::int64_t span = p.dilation[a] * (p.window[a] - 1) + 1;
    o.push_back((p.spatial[a] + p.pad_lo[a] + p.pad_hi[a] - span) / p.strides[a] + 1);
  }
  return o;
}

std::int64_t ceil_div(std::int64_t a, std::int64_t b) {  // b > 0
  return a >= 0 ? (a + b - 1) / b : -((-a) / b);
}

// For tap t: calls run(q, src, lo, hi) for every output row q (positions
// [q * width, (q + 1) * width)), where positions [lo, hi) of the row read the
// image at src + j * stride (j the position in the row) and the others fall
// in the padding; src < 0 (with lo == hi == 0) when the whole row does.
template <class Run>
void tap_runs(const WindowParams& p, const Geometry& g, const Shape& o, std::int64_t t,
              Run&& run) {
  const std::size_t last = g.r - 1;
  const std::int64_t kl = (t / g.tap_div[last]) % p.window[last];
  const std::int64_t shift = kl * p.dilation[last] - p.pad_lo[last];  // image column of j = 0
  const std::int64_t s = p.strides[last];
  const std::int64_t lo = std::clamp<std::int64_t>(ceil_div(-shift, s), 0, g.width);
  const std::int64_t hi =
      std::clamp<std::int64_t>(ceil_div(p.spatial[last] - shift, s), lo, g.width);
  for (std::int64_t q = 0; q < g.rows; ++q) {
    std::int64_t base = 0;
    bool inside = lo < hi;
    for (std::size_t a = 0; a < last && inside; ++a) {
      const std::int64_t oa = (q * g.width / g.out_div[a]) % o[a];
      const std::int64_t ka = (t / g.tap_div[a]) % p.window[a];
      const std::int64_t i = oa * p.strides[a] + ka * p.dilation[a] - p.pad_lo[a];
      inside = i >= 0 && i < p.spatial[a];
      base += i * g.img_strides[a];
    }
    if (inside) {
      run(q, base + lo * s + shift, lo, hi);
    } else {
      run(q, std::int64_t{-1}, std::int64_t{0}, std::int64_t{0});
    }
  }
}

std::shared_ptr<Buffer> unfold(const WindowParams& p, const Array& in, const Aval& out) {
  auto buf = allocate(out);
  if (numel(out.shape) == 0) return buf;
  const Shape o = output_extents(p);
  const Geometry g(p, o);
  const std::int64_t planes = numel(out.shape) / (g.taps * g.positions);
  const std::int64_t s = p.strides[g.r - 1];
  visit_dtype(out.dtype, [&](auto zero) {
    using T = decltype(zero);
    const T pad = static_cast<T>(p.pad_value);
    const T* src = in.data<T>();
    T* dst = static_cast<T*>(buf->host_data());
    parallel_ranges(static_cast<std::size_t>(planes * g.taps),
                    static_cast<std::size_t>(g.positions), [&](std::size_t u0, std::size_t u1) {
                      for (auto u = static_cast<std::int64_t>(u0);
                           u < static_cast<std::int64_t>(u1); ++u) {
                        const T* image = src + u / g.taps * g.image;
                        T* col = dst + u * g.positions;
                        tap_runs(p, g, o, u % g.taps,
                                 [&](std::int64_t q, std::int64_t from, std::int64_t lo,
                                     std::int64_t hi) {
                                   T* row = col + q * g.width;
                                   std::fill(row, row + lo, pad);
                                   if (s == 1) {
                                     std::copy(image + from, image + from + (hi - lo), row + lo);
                                   } else {
                                     for (std::int64_t j = lo; j < hi; ++j) {
                                       row[j] = image[from + (j - lo) * s];
                                     }
                                   }
                                   std::fill(row + hi, row + g.width, pad);
                                 });
                      }
                    });
  });
  return buf;
}

std::shared_ptr<Buffer> fold(const WindowParams& p, const Array& in, const Aval& out) {
  auto buf = allocate(out);
  if (numel(out.shape) == 0) return buf;
  std::memset(buf->host_data(), 0, buf->nbytes());
  const Shape o = output_extents(p);
  const Geometry g(p, o);
  if (g.image == 0) return buf;
  const std::int64_t planes = numel(out.shape) / g.image;
  const std::int64_t s = p.strides[g.r - 1];
  visit_dtype(out.dtype, [&](auto zero) {
    using T = decltype(zero);
    if constexpr (!std::is_same_v<T, bool>) {
      const T* src = in.data<T>();
      T* dst = static_cast<T*>(buf->host_data());
      parallel_ranges(static_cast<std::size_t>(planes),
                      static_cast<std::size_t>(g.taps * g.positions),
                      [&](std::size_t v0, std::size_t v1) {
                        for (auto v = static_cast<std::int64_t>(v0);
                             v < static_cast<std::int64_t>(v1); ++v) {
                          T* image = dst + v * g.image;
                          for (std::int64_t t = 0; t < g.taps; ++t) {
                            const T* col = src + (v * g.taps + t) * g.positions;
                            tap_runs(p, g, o, t,
                                     [&](std::int64_t q, std::int64_t from, std::int64_t lo,
                                         std::int64_t hi) {
                                       const T* row = col + q * g.width;
                                       for (std::int64_t j = lo; j < hi; ++j) {
                                         T& x = image[from + (j - lo) * s];
                                         x = static_cast<T>(x + row[j]);
                                       }
                                     });
                          }
                        }
                      });
    }
  });
  return buf;
}

}  // namespace

std::shared_ptr<Buffer> eval_window(Prim p, const Params& params, std::span<const Array> inputs,
                                    const Aval& out) {
  return visit_family<PrimFamily::kWindow>(p, [&]<Prim P>(PrimC<P>) {
    const auto& q = params.as<ParamsOf<P>>();
    if constexpr (P == Prim::kUnfold) {
      return unfold(q, inputs[0], out);
    } else if constexpr (P == Prim::kFold) {
      return fold(q, inputs[0], out);
    } else {
      static_assert(kUnhandled<P>, "a window primitive without a CPU kernel");
    }
  });
}

}  // namespace kiln::cpu
