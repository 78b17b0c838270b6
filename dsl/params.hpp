// The static parameters of primitive bindings, typed: each row of
// dsl/primitives.inc names the struct its primitive takes (ParamsOf<P>), and a
// binding carries a Params, the variant over those structs. `==` and the hash
// (what CSE, the fused-kernel cache and the program printer use) walk the
// alternative and then every field of it (for_each_field), with floats compared
// by bits, so a field added to a struct joins the key without edits, and two
// primitives' parameters never compare equal by accident.
//
// Adding a parameter struct: define it here (an aggregate, fields with
// defaults), add it to ParamsVariant, and name it in the primitive's row.
#pragma once

#include <bit>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "kiln/runtime/aggregate.hpp"
#include "kiln/runtime/array.hpp"

namespace kiln {

// No static parameters (elementwise ops, stop_gradient).
struct NoParams {};
// sum, max, min, prod: the reduced axes (sorted, normalised).
struct ReduceParams {
  Axes axes;
  bool keepdims = false;
};
// argmax, argmin: one axis, result i32.
struct ArgReduceParams {
  std::int64_t axis = 0;
  bool keepdims = false;
};
// cumsum, cumprod: inclusive, along `axis`, from the end when `reverse`.
struct ScanParams {
  std::int64_t axis = 0;
  bool reverse = false;
};
// argsort: stable, along `axis`.
struct SortParams {
  std::int64_t axis = 0;
  bool descending = false;
};
// astype, bitcast: the target dtype.
struct DTypeParams {
  DType dtype = DType::kF32;
};
// matmul: an operand is stored transposed in its last two axes. Set only by
// the compiler's layout pass (dsl/program.cpp), never by the public op, so
// autodiff never sees it.
struct MatmulParams {
  bool transpose_a = false;
  bool transpose_b = false;
};
// reshape, broadcast_to: the result shape.
struct ShapeParams {
  Shape shape;
};
// transpose: result axis i is input axis perm[i].
struct TransposeParams {
  Axes perm;
};
// concatenate, take, take_along_axis and the scatters: the axis they act along.
struct AxisParams {
  std::int64_t axis = 0;
};
// slice: per-axis start (normalised, >= 0) and step (> 0); the result extents.
struct SliceParams {
  Shape starts;
  Shape steps;
  Shape shape;
};
// unfold / fold (im2col / col2im) over the trailing spatial axes of an image
// (..., S_1 .. S_r), r = window.size(): per spatial axis the window extent,
// stride, dilation and (low, high) zero padding, and the image's unpadded
// extents. The columns are (..., T, L): T = prod(window) taps (row-major over
// the window), L = prod(output extents) positions. unfold reads `pad_value`
// for a tap in the padding; fold sums the taps that land in the image.
struct WindowParams {
  Shape window;
  Shape strides;
  Shape dilation;
  Shape pad_lo;
  Shape pad_hi;
  Shape spatial;
  double pad_value = 0.0;
};
// The output extent per spatial axis (the op checked that the dilated window
// fits): the one formula the op, the kernels and the vjp share.
inline Shape window_extents(const WindowParams& p) {
  Shape out;
  for (std::size_t a = 0; a < p.window.size(); ++a) {
    const std::int64_t span = p.dilation[a] * (p.window[a] - 1) + 1;
    out.push_back((p.spatial[a] + p.pad_lo[a] + p.pad_hi[a] - span) / p.strides[a] + 1);
  }
  return out;
}
// one_hot: the new axis, the number of classes, the result dtype.
struct OneHotParams {
  std::int64_t axis = 0;
  std::int64_t depth = 0;
  DType dtype = DType::kF32;
};
// full: every element `value` (shape and dtype are the result's aval).
struct FullParams {
  double value = 0.0;
  Device device;
};
// arange: start + i * step (length and dtype are the result's aval).
struct ArangeParams {
  double start = 0.0;
  double step = 1.0;
  Device device;
};

// ---- control flow (dsl/control.hpp): parameters holding sub-programs ----
// A sub-program is immutable once traced and shared by pointer: two bindings
// are equal when they hold the same programs (identity, never contents), so
// CSE merges only what one trace produced once.
struct Program;
using ProgramRef = std::shared_ptr<const Program>;

// scan: body(consts..., carry..., x_t...) -> (carry..., y_t...), `length`
// iterations over the leading axis of the xs (from the end when `reverse`).
// Inputs: consts, init carry, xs; outputs: final carry, stacked ys, and with
// `save_carries` (set by autodiff, never by the public op) the carry before
// each iteration, stacked (what the reverse pass reads).
struct ScanLoopParams {
  ProgramRef body;
  std::int64_t length = 0;
  std::int64_t num_consts = 0;
  std::int64_t num_carry = 0;
  bool reverse = false;
  bool save_carries = false;
};
// while: cond(cond_consts..., carry...) -> bool[]; body(body_consts...,
// carry...) -> carry. Inputs: cond consts, body consts, init; outputs: carry.
// `step` is one guarded iteration, what a device runs between reads of the
// condition: step(cond_consts..., body_consts..., go, carry...) ->
// (go && cond(next), next...) with next = go ? body(carry) : carry.
struct WhileParams {
  ProgramRef cond;
  ProgramRef body;
  ProgramRef step;
  std::int64_t num_cond_consts = 0;
  std::int64_t num_body_consts = 0;
};
// cond / switch: inputs (index i32[] clamped to the branches, operands...);
// every branch takes all operands and returns outputs of the same avals.
struct CondParams {
  std::vector<ProgramRef> branches;
};
// call: runs `body` on the inputs. `remat`: the backward pass recomputes the
// body's values from its inputs instead of keeping them (checkpoint).
struct CallParams {
  ProgramRef body;
  std::string name;
  bool remat = false;
};
// custom_vjp: outputs are primal(inputs...); the backward pass runs
// fwd(inputs...) -> (outputs..., residuals...) and then
// bwd(residuals..., output cotangents...) -> one cotangent per input.
struct CustomVjpParams {
  ProgramRef primal;
  ProgramRef fwd;
  ProgramRef bwd;
  std::string name;
  std::int64_t num_residuals = 0;
};

using ParamsVariant =
    std::variant<NoParams, ReduceParams, ArgReduceParams, ScanParams, SortParams, DTypeParams,
                 MatmulParams, ShapeParams, TransposeParams, AxisParams, SliceParams, WindowParams,
                 OneHotParams, FullParams, ArangeParams, ScanLoopParams, WhileParams,
                 CondParams, CallParams, CustomVjpParams>;

template <class T, class V>
struct VariantIndex;
template <class T, class... Ts>
struct VariantIndex<T, std::variant<Ts...>> {
  static constexpr std::size_t value = [] {
    constexpr bool same[] = {std::is_same_v<T, Ts>...};
    std::size_t i = 0;
    while (i < sizeof...(Ts) && !same[i]) ++i;
    return i;
  }();
  static_assert(value < sizeof...(Ts), "not a parameter struct listed in ParamsVariant");
};

namespace detail {
template <class T>
auto param_key(const T& v) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::bit_cast<std::uint64_t>(static_cast<double>(v));
  } else if constexpr (std::is_same_v<T, Device>) {
    return std::pair{static_cast<int>(v.kind), v.index};
  } else {
    return v;
  }
}
[[noreturn]] void wrong_params(std::size_t held, std::size_t wanted);
}  // namespace detail

class Params {
 public:
  Params() = default;
  template <class T>
    requires(!std::is_same_v<std::remove_cvref_t<T>, Params> &&
             std::is_constructible_v<ParamsVariant, T>)
  Params(T&& v) : v_(std::forward<T>(v)) {}  // NOLINT(google-explicit-constructor)
  // A default T built in place (no copy of it).
  template <class T>
  explicit Params(std::in_place_type_t<T> t) : v_(t) {}

  // The struct this binding holds; asking for another is an internal error
  // (bindings are made through bind(), which checks the row's type).
  template <class T>
  const T& as() const {
    const T* p = std::get_if<T>(&v_);
    if (p == nullptr) detail::wrong_params(v_.index(), VariantIndex<T, ParamsVariant>::value);
    return *p;
  }
  template <class T>
  T& as() {
    return const_cast<T&>(std::as_const(*this).as<T>());
  }
  std::size_t index() const { return v_.index(); }
  const ParamsVariant& variant() const { return v_; }

  // Field by field (params.cpp: out of line, so that a program including this
  // header does not instantiate the comparison of every parameter struct).
  friend bool operator==(const Params& a, const Params& b);
  template <class H>
  friend H AbslHashValue(H h, const Params& p) {
    h = H::combine(std::move(h), p.v_.index());
    std::visit(
        [&](const auto& x) {
          detail::for_each_field(x, [&](const auto& f) {
            h = H::combine(std::move(h), detail::param_key(f));
          });
        },
        p.v_);
    return h;
  }

 private:
  ParamsVariant v_;
};

// "[axes=(0, 1) keepdims=true]": every field by name (a false bool left out),
// as the program printer shows it; empty for NoParams.
std::string to_string(const Params& p);
// Every field exactly (floats by their bits), for a string-keyed kernel cache:
// equal keys exactly when the Params are equal.
std::string cache_key(const Params& p);

// The device a creation primitive's parameters name (nullptr for the others).
const Device* creation_device(const Params& p);

}  // namespace kiln
