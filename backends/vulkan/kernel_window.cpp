// The sliding-window primitives as map kernels (kernels.hpp window_spec):
//   unfold: one invocation per column element (plane, taps..., positions...)
//           reads its image element, or the pad value in the padding;
//   fold:   one invocation per image element (plane, spatial...) sums, in tap
//           order, the column elements that read it (a gather: no atomics, and
//           the CPU's order, so both backends give the same bits).
// Index arithmetic is u32 with wrap-around: `i - lo` outside [0, S) is caught
// by one unsigned compare against S. fold's taps are unrolled when the shader
// is built (no loop inside the grid-stride loop, whose iterations per
// invocation Quirks::max_loop_iterations counts).
#include "kiln/backends/vulkan/kernels.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::vk {
namespace {

using spv::Builder;
using spv::Ty;
using spv::Val;

std::uint32_t u32_of(std::int64_t v) { return static_cast<std::uint32_t>(v); }

Val mul_const(Builder& b, const Val& x, std::int64_t c) {
  return c == 1 ? x : b.op("OpIMul", Ty::kU32, {x, b.u32(u32_of(c))});
}
Val add(Builder& b, const Val& x, const Val& y) { return b.op("OpIAdd", Ty::kU32, {x, y}); }
Val both(Builder& b, const Val& x, const Val& y) {
  return b.op("OpLogicalAnd", Ty::kBool, {x, y});
}

struct Extents {
  explicit Extents(const WindowParams& p)
      : out(window_extents(p)), image_strides(p.window.size(), 1),
        tap_strides(p.window.size(), 1), out_strides(p.window.size(), 1) {}
  Shape out, image_strides, tap_strides, out_strides;
  std::int64_t image = 1, taps = 1, positions = 1;
};

Extents extents_of(const WindowParams& p) {
  const std::size_t r = p.window.size();
  Extents e(p);
  for (std::size_t a = r; a-- > 0;) {
    e.image_strides[a] = e.image;
    e.image *= p.spatial[a];
    e.tap_strides[a] = e.taps;
    e.taps *= p.window[a];
    e.out_strides[a] = e.positions;
    e.positions *= e.out[a];
  }
  return e;
}

}  // namespace

MapSpec window_spec(Prim p, const WindowParams& q, DType dtype, const Aval& out) {
  const std::size_t r = q.window.size();
  const Extents e = extents_of(q);
  const std::int64_t planes = numel(out.shape) / (p == Prim::kUnfold ? e.taps * e.positions
                                                                     : e.image);
  MapSpec spec;
  spec.out = dtype;
  spec.inputs = {dtype};
  spec.collapse = false;
  spec.key = detail::str_cat(name(p), cache_key(Params(q)));
  spec.domain = {planes};
  const Ty t = spv::compute_type(dtype);
  if (p == Prim::kUnfold) {
    // domain (plane, k_1 .. k_r, o_1 .. o_r): the column layout, row-major.
    spec.domain.insert(spec.domain.end(), q.window.begin(), q.window.end());
    spec.domain.insert(spec.domain.end(), e.out.begin(), e.out.end());
    spec.views = {View{0, Shape(spec.domain.size(), 0)}};
    spec.body = [q, e, r, t](Builder& b, MapIndex& mi) {
      const Val pad = b.constant(t, q.pad_value);
      if (e.image == 0) return pad;  // every tap in the padding
      Val off = mul_const(b, mi.dim(0), e.image);
      Val inside;
      for (std::size_t a = 0; a < r; ++a) {
        // i = o * stride + k * dilation - lo, wrapping below 0.
        Val i = add(b, mul_const(b, mi.dim(1 + r + a), q.strides[a]),
                    mul_const(b, mi.dim(1 + a), q.dilation[a]));
        if (q.pad_lo[a] != 0) i = b.op("OpISub", Ty::kU32, {i, b.u32(u32_of(q.pad_lo[a]))});
        Val in_a = b.op("OpULessThan", Ty::kBool, {i, b.u32(u32_of(q.spatial[a]))});
        inside = a == 0 ? in_a : both(b, inside, in_a);
        off = add(b, off, mul_const(b, i, e.image_strides[a]));
      }
      const Val v = mi.load_at(0, b.select(inside, off, b.u32(0)));
      return b.select(inside, v, pad);
    };
    return spec;
  }
  // fold: domain (plane, x_1 .. x_r), the image layout.
  spec.domain.insert(spec.domain.end(), q.spatial.begin(), q.spatial.end());
  spec.views = {View{0, Shape(spec.domain.size(), 0)}};
  spec.body = [q, e, r, t](Builder& b, MapIndex& mi) {
    Val acc = b.constant(t, 0);
    const Val cols = mul_const(b, mi.dim(0), e.taps * e.positions);
    for (std::int64_t tap = 0; tap < e.taps; ++tap) {
      Val off = add(b, cols, b.u32(u32_of(tap * e.positions)));
      Val hit;
      for (std::size_t a = 0; a < r; ++a) {
        // The position o with o * stride = x + lo - k * dilation, if any.
        const std::int64_t k = tap / e.tap_strides[a] % q.window[a];
        const std::int64_t shift = q.pad_lo[a] - k * q.dilation[a];
        Val y = mi.dim(1 + a);
        if (shift != 0) y = add(b, y, b.u32(static_cast<std::uint32_t>(shift)));
        Val o = y;
        Val hit_a;
        if (q.strides[a] != 1) {
          const Val s = b.u32(u32_of(q.strides[a]));
          o = b.op("OpUDiv", Ty::kU32, {y, s});
          hit_a = b.op("OpIEqual", Ty::kBool, {b.op("OpUMod", Ty::kU32, {y, s}), b.u32(0)});
        }
        const Val below = b.op("OpULessThan", Ty::kBool, {o, b.u32(u32_of(e.out[a]))});
        hit_a = q.strides[a] != 1 ? both(b, hit_a, below) : below;
        hit = a == 0 ? hit_a : both(b, hit, hit_a);
        off = add(b, off, mul_const(b, o, e.out_strides[a]));
      }
      const Val v = mi.load_at(0, b.select(hit, off, b.u32(0)));
      const Val sum = b.op(spv::is_float(t) ? "OpFAdd" : "OpIAdd", t, {acc, v});
      acc = b.select(hit, sum, acc);
    }
    return acc;
  };
  return spec;
}

}  // namespace kiln::vk
