// CPU kernels for the sliding-window primitives: unfold (im2col) and fold
// (col2im). Both walk the same geometry: for one tap of the window, each row
// of output positions (all spatial axes but the last fixed) reads one strided
// run of an image row, bounded where the tap leaves the image for the
// padding. The runs are planned once per call (Plan: per tap, the bounds of
// its runs and where each row's run starts in the image), so the per-image
// loops only copy: the CNN's rows are 7 to 28 elements long, and a plan
// rebuilt per image and tap cost more than the copies (5-16x a streaming op).
// unfold copies the runs (the padding gets the pad value) in one pass; fold
// adds them back into a zeroed image, tap after tap in tap order, each image
// owned by one task, so every element sums the same terms in the same order
// at every thread count (and in the order the Vulkan kernel uses).
#include <algorithm>
#include <cstring>
#include <vector>

#include "kiln/backends/cpu/bits.hpp"
#include "kiln/backends/cpu/cpu_backend.hpp"
#include "kiln/backends/cpu/parallel.hpp"
#include "kiln/backends/cpu/window.hpp"
#include "kiln/runtime/dtype_inl.hpp"
#include "kiln/runtime/half.hpp"

namespace kiln::cpu {
namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) {  // b > 0
  return a >= 0 ? (a + b - 1) / b : -((-a) / b);
}

}  // namespace

WindowPlan window_plan(const WindowParams& p) {
  const std::size_t r = p.window.size(), last = r - 1;
  WindowPlan pl;
  const Shape out = window_extents(p);
  Shape img_strides(r), tap_div(r);
  for (std::size_t a = r; a-- > 0;) {
    img_strides[a] = pl.image;
    pl.image *= p.spatial[a];
    tap_div[a] = pl.taps;
    pl.taps *= p.window[a];
    pl.positions *= out[a];
  }
  pl.width = out[last];
  pl.rows = pl.positions / pl.width;
  pl.stride = p.strides[last];
  pl.lo.resize(static_cast<std::size_t>(pl.taps));
  pl.hi.resize(static_cast<std::size_t>(pl.taps));
  pl.start.resize(static_cast<std::size_t>(pl.taps * pl.rows));
  const std::int64_t s = pl.stride;
  for (std::int64_t t = 0; t < pl.taps; ++t) {
    const auto k = [&](std::size_t a) { return t / tap_div[a] % p.window[a]; };
    // The last axis: position j reads image column j * s + shift.
    const std::int64_t shift = k(last) * p.dilation[last] - p.pad_lo[last];
    const std::int64_t lo = std::clamp<std::int64_t>(ceil_div(-shift, s), 0, pl.width);
    const std::int64_t hi =
        std::clamp<std::int64_t>(ceil_div(p.spatial[last] - shift, s), lo, pl.width);
    pl.lo[static_cast<std::size_t>(t)] = lo;
    pl.hi[static_cast<std::size_t>(t)] = hi;
    // The leading axes, row by row (an odometer over their output indices).
    Shape idx(last, 0);
    for (std::int64_t q = 0; q < pl.rows; ++q) {
      std::int64_t at = lo * s + shift;
      bool inside = lo < hi;
      for (std::size_t a = 0; a < last; ++a) {
        const std::int64_t i = idx[a] * p.strides[a] + k(a) * p.dilation[a] - p.pad_lo[a];
        inside = inside && i >= 0 && i < p.spatial[a];
        at += i * img_strides[a];
      }
      pl.start[static_cast<std::size_t>(t * pl.rows + q)] = inside ? at : -1;
      for (std::size_t a = last; a-- > 0;) {
        if (++idx[a] < out[a]) break;
        idx[a] = 0;
      }
    }
  }
  return pl;
}

namespace {

template <class T>
void unfold_image(const WindowPlan& pl, const T* image, std::int64_t t, T pad, T* col) {
  const std::int64_t lo = pl.lo[static_cast<std::size_t>(t)];
  const std::int64_t hi = pl.hi[static_cast<std::size_t>(t)];
  const std::int64_t w = pl.width, s = pl.stride;
  const std::int64_t* start = pl.start.data() + t * pl.rows;
  for (std::int64_t q = 0; q < pl.rows; ++q) {
    T* __restrict row = col + q * w;
    if (start[q] < 0) {
      std::fill(row, row + w, pad);
      continue;
    }
    for (std::int64_t j = 0; j < lo; ++j) row[j] = pad;
    const T* __restrict from = image + start[q];
    if (s == 1) {
      std::memcpy(row + lo, from, static_cast<std::size_t>(hi - lo) * sizeof(T));
    } else if (s == 2) {  // a constant stride the vectorizer turns into shuffles
      for (std::int64_t j = lo; j < hi; ++j) row[j] = from[(j - lo) * 2];
    } else {
      for (std::int64_t j = lo; j < hi; ++j) row[j] = from[(j - lo) * s];
    }
    for (std::int64_t j = hi; j < w; ++j) row[j] = pad;
  }
}

template <class T>
void fold_image(const WindowPlan& pl, const T* cols, T* image) {
  const std::int64_t w = pl.width, s = pl.stride;
  for (std::int64_t t = 0; t < pl.taps; ++t) {
    const std::int64_t lo = pl.lo[static_cast<std::size_t>(t)];
    const std::int64_t n = pl.hi[static_cast<std::size_t>(t)] - lo;
    const std::int64_t* start = pl.start.data() + t * pl.rows;
    const T* col = cols + t * pl.positions;
    for (std::int64_t q = 0; q < pl.rows; ++q) {
      if (start[q] < 0) continue;
      const T* __restrict row = col + q * w + lo;
      T* __restrict into = image + start[q];
      if (s == 1) {
        for (std::int64_t j = 0; j < n; ++j) into[j] = static_cast<T>(into[j] + row[j]);
      } else if (s == 2) {
        for (std::int64_t j = 0; j < n; ++j) into[j * 2] = static_cast<T>(into[j * 2] + row[j]);
      } else {
        for (std::int64_t j = 0; j < n; ++j) into[j * s] = static_cast<T>(into[j * s] + row[j]);
      }
    }
  }
}

}  // namespace

template <class T>
void unfold_units(const WindowPlan& pl, const T* src, std::int64_t u0, std::int64_t u1, T pad,
                  T* dst) {
  for (std::int64_t u = u0; u < u1; ++u) {
    unfold_image(pl, src + u / pl.taps * pl.image, u % pl.taps, pad, dst + (u - u0) * pl.positions);
  }
}

template <class T>
void fold_images(const WindowPlan& pl, const T* cols, std::int64_t v0, std::int64_t v1, T* dst) {
  std::fill(dst + v0 * pl.image, dst + v1 * pl.image, T{0});
  for (std::int64_t v = v0; v < v1; ++v) {
    fold_image(pl, cols + (v - v0) * pl.taps * pl.positions, dst + v * pl.image);
  }
}

template void unfold_units(const WindowPlan&, const float*, std::int64_t, std::int64_t, float,
                           float*);
template void unfold_units(const WindowPlan&, const double*, std::int64_t, std::int64_t, double,
                           double*);
template void unfold_units(const WindowPlan&, const std::uint16_t*, std::int64_t, std::int64_t,
                           std::uint16_t, std::uint16_t*);
template void fold_images(const WindowPlan&, const float*, std::int64_t, std::int64_t, float*);
template void fold_images(const WindowPlan&, const double*, std::int64_t, std::int64_t, double*);

namespace {

// The pad value as the bits of one `dtype` element, in the unsigned word U of
// that size (f16 and bf16 rounded as narrowing an f32 result would).
template <class U>
U pad_bits(DType dtype, double value) {
  if (dtype == DType::kF16) return static_cast<U>(float_to_half(static_cast<float>(value)));
  if (dtype == DType::kBF16) return static_cast<U>(float_to_bf16(static_cast<float>(value)));
  return visit_dtype(dtype, [&](auto zero) -> U {
    using T = decltype(zero);
    U bits{};
    if constexpr (sizeof(T) == sizeof(U)) {  // U is chosen by dtype's size
      const T v = static_cast<T>(value);
      std::memcpy(&bits, &v, sizeof(T));
    }
    return bits;
  });
}

// Moves elements as words of their size: no arithmetic, so 16-bit floats are
// not widened to f32 and back (half.cpp leaves unfold to this).
std::shared_ptr<Buffer> unfold(const WindowParams& p, const Array& in, const Aval& out) {
  auto buf = allocate(out);
  if (numel(out.shape) == 0) return buf;
  const WindowPlan pl = window_plan(p);
  const std::int64_t units = numel(out.shape) / pl.positions;  // (image, tap) pairs
  visit_element_size(out.dtype, [&](auto zero) {
    using U = decltype(zero);
    const U pad = pad_bits<U>(out.dtype, p.pad_value);
    const U* src = host_elements<U>(in);
    U* dst = static_cast<U*>(buf->host_data());
    parallel_ranges(static_cast<std::size_t>(units), static_cast<std::size_t>(pl.positions),
                    [&](std::size_t u0, std::size_t u1) {
                      const auto lo = static_cast<std::int64_t>(u0);
                      unfold_units(pl, src, lo, static_cast<std::int64_t>(u1), pad,
                                   dst + lo * pl.positions);
                    });
  });
  return buf;
}

std::shared_ptr<Buffer> fold(const WindowParams& p, const Array& in, const Aval& out) {
  auto buf = allocate(out);
  if (numel(out.shape) == 0) return buf;
  const WindowPlan pl = window_plan(p);
  if (pl.image == 0) {
    std::memset(buf->host_data(), 0, buf->nbytes());
    return buf;
  }
  const std::int64_t images = numel(out.shape) / pl.image;
  visit_dtype(out.dtype, [&](auto zero) {
    using T = decltype(zero);
    if constexpr (!std::is_same_v<T, bool>) {  // fold refuses bool
      const T* src = in.data<T>();
      T* dst = static_cast<T*>(buf->host_data());
      parallel_ranges(static_cast<std::size_t>(images),
                      static_cast<std::size_t>(pl.taps * pl.positions),
                      [&](std::size_t v0, std::size_t v1) {
                        const auto lo = static_cast<std::int64_t>(v0);
                        fold_images(pl, src + lo * pl.taps * pl.positions, lo,
                                    static_cast<std::int64_t>(v1), dst);
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
