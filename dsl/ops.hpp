// The array DSL: free functions and C++ operators over kiln::Array. Each function
// checks its arguments (errors are prefixed with the op name and show shapes and
// dtypes), computes the result's shape and dtype, and binds a primitive.
//
// dtype rules (docs/DTYPES.md): no implicit promotion between arrays; mixing dtypes
// is a DTypeError naming both. A C++ scalar operand takes the array's dtype (an
// integer array with a non-integral scalar is an error). Comparisons give bool.
#pragma once

#include <concepts>
#include <cstdint>
#include <array>
#include <initializer_list>
#include <optional>
#include <span>
#include <utility>
#include <string_view>
#include <vector>

#include "kiln/runtime/array.hpp"

namespace kiln {

// An axis argument: one axis, a list of axes, or (default) all axes.
class AxisArg {
 public:
  AxisArg() = default;  // all axes
  AxisArg(std::int64_t axis) : all_(false), axes_{axis} {}  // NOLINT
  AxisArg(int axis) : all_(false), axes_{axis} {}           // NOLINT
  AxisArg(std::initializer_list<std::int64_t> axes) : all_(false), axes_(axes) {}
  AxisArg(const Axes& axes) : all_(false), axes_(axes) {}  // NOLINT
  AxisArg(bool) = delete;  // sum(a, true) is almost surely a keepdims mistake
  bool all() const { return all_; }
  const Axes& axes() const { return axes_; }

 private:
  bool all_ = true;
  Axes axes_;
};

// ---- creation (on `device`, default: default_device()) ----
Array zeros(const Shape& shape, DType dtype = f32);
Array ones(const Shape& shape, DType dtype = f32);
Array full(const Shape& shape, double value, DType dtype = f32);
Array zeros(const Shape& shape, DType dtype, Device device);
Array ones(const Shape& shape, DType dtype, Device device);
Array full(const Shape& shape, double value, DType dtype, Device device);
Array zeros_like(const Array& a);
Array ones_like(const Array& a);
Array full_like(const Array& a, double value);
// [start, stop) by step, like numpy.arange.
Array arange(double stop, DType dtype = i32);
Array arange(double start, double stop, double step = 1.0, DType dtype = i32);
Array arange(double start, double stop, double step, DType dtype, Device device);

// From host data (copied) onto the default device.
template <class T>
Array array(const std::vector<T>& data, const Shape& shape);
template <class T>
Array array(std::initializer_list<T> data);  // 1-D
// Built in place by host code (Array::from_writer) onto the default device:
//   array<float>({n, 784}, [&](std::span<float> out) { ... fill out ... })
// On the CPU nothing is copied; elsewhere the one upload is the only copy.
template <class T, class Write>
  requires std::invocable<Write&, std::span<T>>
Array array(const Shape& shape, Write&& write);
template <class T>
Array scalar(T value);  // 0-D
// to_device(a, device): runtime/array.hpp.

// ---- unary elementwise ----
Array neg(const Array& a);
Array abs(const Array& a);
Array exp(const Array& a);    // floating only
Array log(const Array& a);    // floating only
Array tanh(const Array& a);   // floating only
Array sqrt(const Array& a);   // floating only
Array rsqrt(const Array& a);  // floating only: 1/sqrt(a)
Array sigmoid(const Array& a);  // floating only
Array relu(const Array& a);   // numeric: max(a, 0)
Array logical_not(const Array& a);  // bool only
// Float math, one function per KILN_MATH row of dsl/primitives.inc: sin, cos,
// tan, asin, acos, atan, sinh, cosh, log2, exp2, log1p (log(1 + a), accurate
// for small a), expm1 (exp(a) - 1, likewise), floor, ceil, trunc, round (half
// to even, as numpy.round), sign (-1, 1, or a itself for zeros and NaN), erf
// and erfinv (erfinv(+-1) = +-inf, NaN past +-1), ...
// Floating only; dsl/unary_math.hpp defines each (precision there). On Vulkan
// the transcendental ones take f32 only.
// Binary float math, one per KILN_MATH2 row: atan2(a, b) is the angle of the
// point (b, a), as numpy.arctan2 (a the y coordinate), in [-pi, pi].
#define KILN_PRIM(id, name, family, params, traits)
#define KILN_MATH(id, name, traits) Array name(const Array& a);
#define KILN_MATH2(id, name, traits) Array name(const Array& a, const Array& b);
#include "kiln/dsl/primitives.inc"
#undef KILN_MATH2
#undef KILN_MATH
#undef KILN_PRIM

// ---- composites (dsl/ops_composite.cpp: written in the ops here, fused) ----
// (No `square`: it is a * a, and a kiln::square would make every application's
// own square() ambiguous under `using namespace kiln`.)
Array reciprocal(const Array& a);  // 1 / a, floating
// minimum(maximum(a, lo), hi), broadcasting; scalar bounds take a's dtype.
Array clip(const Array& a, const Array& lo, const Array& hi);
Array clip(const Array& a, double lo, double hi);
// bool results; floating operands.
Array isnan(const Array& a);
Array isinf(const Array& a);
Array isfinite(const Array& a);
// log(exp(a) + exp(b)) without overflow, as jnp.logaddexp; floating.
Array logaddexp(const Array& a, const Array& b);
// NaN -> nan, +inf -> posinf, -inf -> neginf (default: the dtype's largest and
// lowest finite values), as numpy.nan_to_num; integer and bool arrays unchanged.
Array nan_to_num(const Array& a, double nan = 0.0,
                 std::optional<double> posinf = std::nullopt,
                 std::optional<double> neginf = std::nullopt);
// Python's a // b and a % b (numpy.floor_divide / numpy.remainder): the quotient
// rounds toward -inf and the remainder takes the divisor's sign. Integers: x // 0
// and x % 0 give 0 (as numpy). Floats: as numpy's divmod, with fmod(a, b)
// computed as a - trunc(a / b) * b (exact unless a / b rounds to an integer).
Array floor_divide(const Array& a, const Array& b);
Array mod(const Array& a, const Array& b);
Array remainder(const Array& a, const Array& b);  // = mod
// jax.lax.rem: the truncated remainder, with the dividend's sign (C's fmod and
// %). Integers: x rem 0 is x, and INT_MIN rem -1 is 0 (XLA's rules). Floats:
// computed as a - trunc(a / b) * b like floor_divide's fmod (exact unless a / b
// rounds to an integer); x rem 0 and inf rem y are NaN, x rem inf is x.
Array rem(const Array& a, const Array& b);

// ---- binary elementwise with numpy broadcasting ----
Array add(const Array& a, const Array& b);
Array subtract(const Array& a, const Array& b);
Array multiply(const Array& a, const Array& b);
// Floating: IEEE division. Integer: rounds toward zero; x / 0 gives 0.
Array divide(const Array& a, const Array& b);
Array power(const Array& a, const Array& b);  // floating only
Array maximum(const Array& a, const Array& b);
Array minimum(const Array& a, const Array& b);
Array equal(const Array& a, const Array& b);
Array not_equal(const Array& a, const Array& b);
Array less(const Array& a, const Array& b);
Array less_equal(const Array& a, const Array& b);
Array greater(const Array& a, const Array& b);
Array greater_equal(const Array& a, const Array& b);
Array logical_and(const Array& a, const Array& b);  // bool only
Array logical_or(const Array& a, const Array& b);   // bool only
// Elementwise cond ? a : b; cond is bool; a and b share a dtype; all broadcast.
Array where(const Array& cond, const Array& a, const Array& b);
Array astype(const Array& a, DType dtype);

// ---- bitwise (docs/DTYPES.md, "Bitwise ops and bitcast") ----
// and/or/xor/not: i32, u32 or bool (on bool they equal the logical ops); both
// operands share a dtype; numpy broadcasting.
Array bitwise_and(const Array& a, const Array& b);
Array bitwise_or(const Array& a, const Array& b);
Array bitwise_xor(const Array& a, const Array& b);
Array bitwise_not(const Array& a);
// Shifts of i32/u32 by an amount of the same dtype, as XLA defines them: an
// amount outside [0, 32) gives 0. shift_right_logical fills with zeros (i32
// too: it shifts the bit pattern).
Array shift_left(const Array& a, const Array& amount);
Array shift_right_logical(const Array& a, const Array& amount);
// Fills with copies of the sign bit (of the bit pattern: u32 too, as XLA); an
// amount outside [0, 32) gives all sign bits (0 or -1).
Array shift_right_arithmetic(const Array& a, const Array& amount);
// Reinterprets the bits of each element as `dtype` (jax.lax.bitcast_convert_type):
// f32, i32 and u32 (element size 4) convert among each other; other pairs are a
// DTypeError. The result shares the input's buffer on the CPU backend.
Array bitcast(const Array& a, DType dtype);

// ---- reductions (numpy semantics; empty AxisArg = all axes) ----
Array sum(const Array& a, AxisArg axes = {}, bool keepdims = false);
Array mean(const Array& a, AxisArg axes = {}, bool keepdims = false);  // floating
Array prod(const Array& a, AxisArg axes = {}, bool keepdims = false);  // empty: 1
Array max(const Array& a, AxisArg axes = {}, bool keepdims = false);
Array min(const Array& a, AxisArg axes = {}, bool keepdims = false);
// Index (i32) of the first maximum along `axis`; without an axis, of the flattened
// array.
Array argmax(const Array& a);
Array argmax(const Array& a, std::int64_t axis, bool keepdims = false);
Array argmin(const Array& a);
Array argmin(const Array& a, std::int64_t axis, bool keepdims = false);
// Inclusive scans along `axis` (jnp.cumsum / cumprod; reverse: from the end, as
// jax.lax.cumsum(reverse=True)); without an axis, over the flattened array.
// Bool counts as i32. Deterministic: each line accumulates in order.
Array cumsum(const Array& a, std::int64_t axis, bool reverse = false);
Array cumsum(const Array& a);
Array cumprod(const Array& a, std::int64_t axis, bool reverse = false);
Array cumprod(const Array& a);

// ---- reduction composites (dsl/ops_reduce_composite.cpp) ----
// log(sum(exp(a))) shifted by the max (jax.nn.logsumexp): rows of -inf give
// -inf, an empty reduction gives -inf; floating.
Array logsumexp(const Array& a, AxisArg axes = {}, bool keepdims = false);
// Variance mean((a - mean(a))^2) with divisor max(N - ddof, 0); floating.
Array var(const Array& a, AxisArg axes = {}, std::int64_t ddof = 0,
          bool keepdims = false);
// sqrt(var(...)). Call it kiln::std: under `using namespace kiln` an
// unqualified std(x) is ambiguous with namespace std (std::vector still works).
Array std(const Array& a, AxisArg axes = {}, std::int64_t ddof = 0,
          bool keepdims = false);
// var(a, axes, true) would silently read keepdims as ddof = 1.
template <class B>
  requires std::same_as<B, bool>
Array var(const Array& a, AxisArg axes, B keepdims) = delete;
template <class B>
  requires std::same_as<B, bool>
Array std(const Array& a, AxisArg axes, B keepdims) = delete;
// Whether any / every element is nonzero (NaN counts as nonzero): bool results;
// any of nothing is false, all of nothing is true.
Array any(const Array& a, AxisArg axes = {}, bool keepdims = false);
Array all(const Array& a, AxisArg axes = {}, bool keepdims = false);
Array count_nonzero(const Array& a, AxisArg axes = {},
                    bool keepdims = false);  // i32
// The vector norm of the elements over `axes` (all when empty), as
// jnp.linalg.vector_norm: ord 2 sqrt(sum(x^2)) (over a matrix's two axes the
// Frobenius norm, jnp.linalg.norm's default), 1 sum|x|, inf max|x|, -inf
// min|x|, 0 the count of nonzeros, otherwise sum(|x|^ord)^(1/ord). Floating.
// Gradients are JAX's, at 0 too: ord 2 gives NaN there (0 times sqrt's
// infinite slope, as jax.grad(jnp.linalg.norm)), ord 1 gives 1 (abs's), inf
// splits among the ties (max's) and with jnp's initial 0 (1/8 each of 4 zeros).
Array norm(const Array& a, double ord = 2.0, AxisArg axes = {}, bool keepdims = false);

// ---- linear algebra ----
// numpy.matmul: 1-D operands are promoted (and the added dim removed after),
// leading (batch) dims broadcast. Floating dtypes; 2-D goes through BLAS.
Array matmul(const Array& a, const Array& b);
// numpy.einsum over 1 to 3 operands ("ij,jk->ik", or implicit "ij,jk": the letters
// seen once, sorted); a letter repeated in one operand takes its diagonal. No
// ellipsis. Lowered to transposes, reshapes, sums and (batched) matmul; integer
// operands multiply and sum instead (dsl/einsum.cpp).
Array einsum(std::string_view subscripts, std::span<const Array> operands);
Array einsum(std::string_view subscripts, std::initializer_list<Array> operands);

// ---- layout ----
Array reshape(const Array& a, const Shape& shape);  // one dim may be -1
Array transpose(const Array& a);                    // reverses the axes
Array transpose(const Array& a, const Axes& perm);
Array permute(const Array& a, const Axes& perm);  // = transpose(a, perm)
Array broadcast_to(const Array& a, const Shape& shape);
Array expand_dims(const Array& a, std::int64_t axis);
Array squeeze(const Array& a, AxisArg axes = {});  // default: every size-1 axis
Array concatenate(std::span<const Array> arrays, std::int64_t axis = 0);
Array concatenate(std::initializer_list<Array> arrays, std::int64_t axis = 0);
// Python-style a[start:stop:step] along one axis; negative start/stop count from
// the end and out-of-range bounds are clamped, as in numpy. step > 0.
Array slice_axis(const Array& a, std::int64_t axis, std::int64_t start,
                 std::int64_t stop, std::int64_t step = 1);
// Per-axis slice over the leading starts.size() axes.
Array slice(const Array& a, const Shape& starts, const Shape& stops,
            const Shape& steps = {});

// ---- sliding windows (dsl/ops_window.cpp) ----
// A window over the trailing size.size() (spatial) axes of an image: per
// spatial axis its extent, stride, (low, high) zero padding and dilation.
// Empty strides, padding and dilation mean 1, 0 and 1 on every axis.
struct Window {
  Shape size;
  Shape strides = {};
  std::vector<std::array<std::int64_t, 2>> padding = {};
  Shape dilation = {};
};
// im2col (torch.nn.functional.unfold, over any number of spatial axes): x of
// shape (..., S_1 .. S_r) -> (..., T, L), where T = prod(size) is the window's
// taps (row-major) and L the output positions (row-major over the output
// extents O_a = (S_a + lo_a + hi_a - dilation_a * (size_a - 1) - 1) /
// stride_a + 1); a tap in the padding reads `pad_value`. The leading axes
// (batch, channels, ...) are carried through.
Array unfold(const Array& x, const Window& window, double pad_value = 0.0);
// col2im, unfold's transpose: cols (..., T, L) -> (..., spatial...), each
// image element the sum of the taps that read it, in tap order (taps in the
// padding are dropped). Numeric dtypes only.
Array fold(const Array& cols, const Shape& spatial, const Window& window);
// The output extents O_a of `window` over an image of `spatial` extents
// (ShapeError naming `op` when the dilated window does not fit).
Shape window_output(const char* op, const Shape& spatial, const Window& window);

// ---- layout composites (dsl/ops_layout_composite.cpp) ----
// Joins same-shape arrays along a new axis (numpy.stack).
Array stack(std::span<const Array> arrays, std::int64_t axis = 0);
Array stack(std::initializer_list<Array> arrays, std::int64_t axis = 0);
// numpy.split: `sections` equal parts (an error if the axis does not divide), or
// the pieces between `indices` (Python slice bounds: clamped, may be empty).
std::vector<Array> split(const Array& a, std::int64_t sections,
                         std::int64_t axis = 0);
std::vector<Array> split(const Array& a, const Shape& indices,
                         std::int64_t axis = 0);
// split(a, {2}) splits at index 2 (without this overload it would mean 2 parts).
std::vector<Array> split(const Array& a,
                         std::initializer_list<std::int64_t> indices,
                         std::int64_t axis = 0);
Array flip(const Array& a, AxisArg axes = {});  // reverses; default: every axis
// numpy.tile: a repeated reps[i] times along axis i (reps and a.ndim() are
// matched by prepending 1s to the shorter).
Array tile(const Array& a, const Shape& reps);
// Each element `repeats` times along `axis` (numpy.repeat); no axis: flattened.
Array repeat(const Array& a, std::int64_t repeats,
             std::optional<std::int64_t> axis = std::nullopt);
// Elements shifted by `shift` along `axis`, wrapping; no axis: flattened.
Array roll(const Array& a, std::int64_t shift,
           std::optional<std::int64_t> axis = std::nullopt);
// (before, after) per axis; a single entry applies to every axis.
using PadWidth = std::vector<std::array<std::int64_t, 2>>;
// numpy.pad with mode "constant" (constant_value), "edge" (repeats the border)
// or "reflect" (mirrors without repeating the border).
Array pad(const Array& a, const PadWidth& pad_width,
          std::string_view mode = "constant", double constant_value = 0.0);
// Zeros above (tril) / below (triu) the k-th diagonal of the last two axes.
Array tril(const Array& a, std::int64_t k = 0);
Array triu(const Array& a, std::int64_t k = 0);
// The offset diagonal of the (axis1, axis2) planes, as a new last axis.
Array diagonal(const Array& a, std::int64_t offset = 0, std::int64_t axis1 = 0,
               std::int64_t axis2 = 1);
// Coordinate arrays from 1-D arrays; "xy" swaps the first two output axes.
std::vector<Array> meshgrid(std::span<const Array> xs,
                            std::string_view indexing = "xy");
std::vector<Array> meshgrid(std::initializer_list<Array> xs,
                            std::string_view indexing = "xy");
// `num` evenly spaced values from start to stop (included unless !endpoint,
// and then exactly `stop`); integer dtypes floor, as numpy >= 2.
Array linspace(double start, double stop, std::int64_t num = 50,
               bool endpoint = true, DType dtype = f32);
// (n, m) with ones on the k-th diagonal; m < 0 means m = n.
Array eye(std::int64_t n, std::int64_t m = -1, std::int64_t k = 0,
          DType dtype = f32);

// ---- indexing ----
// numpy.take(a, indices, axis): result shape a.shape[:axis] + indices.shape +
// a.shape[axis+1:]. Indices are i32/u32; negative indices count from the end; out
// of range is an IndexError.
Array take(const Array& a, const Array& indices, std::int64_t axis);
// tf.gather(a, indices, axis, batch_dims) (dsl/ops_gather.cpp, a composite): the
// first batch_dims axes of a and indices are matched batch axes (equal shapes),
// each batch element taking from its own slice: result shape a.shape[:axis] +
// indices.shape[batch_dims:] + a.shape[axis+1:]. axis >= batch_dims; negative
// axis counts from a's end, negative batch_dims from indices' end.
Array take(const Array& a, const Array& indices, std::int64_t axis, std::int64_t batch_dims);
// numpy.take_along_axis: indices has a's rank and broadcasts on the other axes.
Array take_along_axis(const Array& a, const Array& indices, std::int64_t axis);
// One-hot encoding along a new last axis of size `depth`; indices outside
// [0, depth) give an all-zero row (as jax.nn.one_hot).
Array one_hot(const Array& indices, std::int64_t depth, DType dtype = f32);
// The transposes of take: `updates` has take's result shape
// (a.shape[:axis] + indices.shape + a.shape[axis+1:]); the result is `a` with
// each update added at (scatter: written to) the index it pairs with, as
// jnp's a.at[idx].add(u) / .set(u) along `axis`. Deterministic on every
// backend: repeated indices add in index order; for scatter the last wins.
Array scatter_add(const Array& a, const Array& indices, const Array& updates,
                  std::int64_t axis);
Array scatter(const Array& a, const Array& indices, const Array& updates,
              std::int64_t axis);
// The transpose of take_along_axis: indices and updates have a's shape except
// along `axis`; out[.., indices[.., k, ..], ..] += updates[.., k, ..].
Array scatter_add_along_axis(const Array& a, const Array& indices,
                             const Array& updates, std::int64_t axis);

// jax.lax.dynamic_slice / dynamic_update_slice: the block of `sizes` (the
// update's shape) at `starts`, one 0-d i32/u32 array per axis (traced values
// allowed). A negative start counts from the end once (start + n) and starts
// are then clamped so the block fits, as jax.lax.dynamic_slice does.
Array dynamic_slice(const Array& a, std::span<const Array> starts, const Shape& sizes);
Array dynamic_slice(const Array& a, std::initializer_list<Array> starts, const Shape& sizes);
Array dynamic_update_slice(const Array& a, const Array& update, std::span<const Array> starts);
Array dynamic_update_slice(const Array& a, const Array& update, std::initializer_list<Array> starts);

// ---- sorting ----
// Stable: equal values keep their index order (also descending, as lax.top_k);
// NaN is the largest value (last ascending, first descending); -0.0 == 0.0.
// argsort gives i32 indices; sort and top_k gather with them (so they have
// gradients). top_k is over the last axis: the k largest values, largest
// first, and their indices.
Array argsort(const Array& a, std::int64_t axis = -1, bool descending = false);
Array sort(const Array& a, std::int64_t axis = -1, bool descending = false);
std::pair<Array, Array> top_k(const Array& a, std::int64_t k);

// ---- C++ operators ----
Array operator-(const Array& a);
Array operator!(const Array& a);  // logical_not
Array operator+(const Array& a, const Array& b);
Array operator-(const Array& a, const Array& b);
Array operator*(const Array& a, const Array& b);
Array operator/(const Array& a, const Array& b);
Array operator==(const Array& a, const Array& b);
Array operator!=(const Array& a, const Array& b);
Array operator<(const Array& a, const Array& b);
Array operator<=(const Array& a, const Array& b);
Array operator>(const Array& a, const Array& b);
Array operator>=(const Array& a, const Array& b);
Array operator&(const Array& a, const Array& b);  // logical_and (bool)
Array operator|(const Array& a, const Array& b);  // logical_or (bool)

// Scalar operands take the array's dtype (see the header comment).
Array scalar_like(const Array& like, double value, const char* op);

template <class S>
concept Scalar = std::is_arithmetic_v<S> && !std::is_same_v<S, bool>;

#define KILN_SCALAR_BINARY_(OP, FN)                                    \
  template <Scalar S>                                                  \
  Array OP(const Array& a, S s) {                                      \
    return FN(a, scalar_like(a, static_cast<double>(s), #FN));         \
  }                                                                    \
  template <Scalar S>                                                  \
  Array OP(S s, const Array& a) {                                      \
    return FN(scalar_like(a, static_cast<double>(s), #FN), a);         \
  }
KILN_SCALAR_BINARY_(operator+, add)
KILN_SCALAR_BINARY_(operator-, subtract)
KILN_SCALAR_BINARY_(operator*, multiply)
KILN_SCALAR_BINARY_(operator/, divide)
KILN_SCALAR_BINARY_(operator==, equal)
KILN_SCALAR_BINARY_(operator!=, not_equal)
KILN_SCALAR_BINARY_(operator<, less)
KILN_SCALAR_BINARY_(operator<=, less_equal)
KILN_SCALAR_BINARY_(operator>, greater)
KILN_SCALAR_BINARY_(operator>=, greater_equal)
KILN_SCALAR_BINARY_(add, add)
KILN_SCALAR_BINARY_(subtract, subtract)
KILN_SCALAR_BINARY_(multiply, multiply)
KILN_SCALAR_BINARY_(divide, divide)
KILN_SCALAR_BINARY_(power, power)
KILN_SCALAR_BINARY_(maximum, maximum)
KILN_SCALAR_BINARY_(floor_divide, floor_divide)
KILN_SCALAR_BINARY_(mod, mod)
KILN_SCALAR_BINARY_(remainder, remainder)
KILN_SCALAR_BINARY_(rem, rem)
KILN_SCALAR_BINARY_(minimum, minimum)
KILN_SCALAR_BINARY_(bitwise_and, bitwise_and)
KILN_SCALAR_BINARY_(bitwise_or, bitwise_or)
KILN_SCALAR_BINARY_(bitwise_xor, bitwise_xor)
KILN_SCALAR_BINARY_(shift_left, shift_left)
KILN_SCALAR_BINARY_(shift_right_logical, shift_right_logical)
KILN_SCALAR_BINARY_(shift_right_arithmetic, shift_right_arithmetic)
#undef KILN_SCALAR_BINARY_

// ---- template implementations ----
template <class T>
Array array(const std::vector<T>& data, const Shape& shape) {
  return to_device(Array::from_data<T>(std::span<const T>(data), shape),
                   default_device());
}
template <>
inline Array array<bool>(const std::vector<bool>& data, const Shape& shape) {
  std::vector<unsigned char> bytes(data.begin(), data.end());
  detail::check_data_size(bytes.size(), shape);
  auto buf = HostBuffer::allocate(bytes.size());
  std::copy(bytes.begin(), bytes.end(),
            static_cast<unsigned char*>(buf->host_data()));
  return to_device(Array(DType::kBool, shape, std::move(buf)), default_device());
}
template <class T, class Write>
  requires std::invocable<Write&, std::span<T>>
Array array(const Shape& shape, Write&& write) {
  return to_device(Array::from_writer<T>(shape, std::forward<Write>(write)), default_device());
}
template <class T>
Array array(std::initializer_list<T> data) {
  return array(std::vector<T>(data),
               Shape{static_cast<std::int64_t>(data.size())});
}
template <class T>
Array scalar(T value) {
  return array(std::vector<T>{value}, Shape{});
}

}  // namespace kiln
