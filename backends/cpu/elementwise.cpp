// CPU kernels for the elementwise primitives: unary, binary, where and astype.
//
// The common ops have SIMD kernels per x86-64 level (simd_kernels.cpp, picked by
// flat_kernel()); the generic kernels here cover the rest (math functions,
// integer division and shifts, power, ...) and every op on a machine level
// without one. Float math runs on xsimd batches of this file's target level
// (SSE4.2), every element through the same code (the last partial batch through
// a padded copy); everything else is a plain loop over one element functor per
// op, written once for every dtype it accepts, which GCC vectorizes where it
// can (KILN_VECTORIZE). Operands with as many elements as the result and
// 1-element operands take the flat path; other broadcasts are cut into
// contiguous output rows (see broadcast.hpp) over which the same loops run.
//
// Plain loops rather than xtensor expressions: every (primitive, dtype) pair is
// instantiated here, and as xtensor assignments (four per binary op: flat, two
// scalar sides and strided broadcasting) they took 70 of this file's 78 s to
// compile, on each of CI's builds; the hot paths are the SIMD kernels anyway.
//
// Integer results are defined for every input, never UB (UBSan runs in CI): i32
// add/subtract/multiply/neg/abs wrap modulo 2^32 (they run on the u32 bit
// pattern), integer division rounds toward zero with x / 0 == 0 and
// INT_MIN / -1 == INT_MIN, and float -> integer conversion saturates (NaN ->
// 0). Shifts follow XLA: an amount outside [0, 32) gives 0 (in C++ it would be
// UB), and shift_right_logical shifts the bit pattern of i32 too.
//
// The kernels are written once over flat operands (elementwise.hpp): the eval_*
// entry points here run them over whole arrays or broadcast rows, the fused
// kernels (fused.cpp) over chunks, so both paths share every op's definition.
#include "kiln/backends/cpu/elementwise.hpp"
#include "kiln/backends/cpu/half.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <type_traits>
#include <xsimd/xsimd.hpp>

#include "kiln/backends/cpu/bits.hpp"
#include "kiln/backends/cpu/broadcast.hpp"
#include "kiln/backends/cpu/cpu_backend.hpp"
#include "kiln/backends/cpu/float_ops.hpp"
#include "kiln/backends/cpu/nan_minmax.hpp"
#include "kiln/backends/cpu/simd.hpp"
#include "kiln/dsl/unary_math.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"
#include "kiln/runtime/thread_pool.hpp"

namespace kiln::cpu {
namespace {

// ---- element functors (scalar) ----

// Logical ops on bool elements stored as 0/1 bytes: bitwise.
struct BitAnd {
  template <class T>
  T operator()(T x, T y) const {
    return static_cast<T>(x & y);
  }
};
struct BitOr {
  template <class T>
  T operator()(T x, T y) const {
    return static_cast<T>(x | y);
  }
};
struct BitXor {
  template <class T>
  T operator()(T x, T y) const {
    return static_cast<T>(x ^ y);
  }
};
struct BitNot {
  template <class T>
  T operator()(T x) const {
    return static_cast<T>(~x);
  }
};

// Shifts on the unsigned bit pattern; amounts outside [0, 32) (negative i32
// amounts become huge unsigned ones) give 0 rather than UB.
struct ShiftLeft {
  template <class T>
  T operator()(T x, T y) const {
    using U = std::make_unsigned_t<T>;
    const auto n = static_cast<U>(y);
    return n >= 32 ? T(0) : static_cast<T>(static_cast<U>(x) << n);
  }
};
struct ShiftRightLogical {
  template <class T>
  T operator()(T x, T y) const {
    using U = std::make_unsigned_t<T>;
    const auto n = static_cast<U>(y);
    return n >= 32 ? T(0) : static_cast<T>(static_cast<U>(x) >> n);
  }
};
struct FlipBit {
  template <class T>
  T operator()(T x) const {
    return static_cast<T>(x ^ 1);
  }
};

// |x| for i32 with |INT_MIN| == INT_MIN (std::abs would be UB there).
struct WrappingAbs {
  std::int32_t operator()(std::int32_t x) const {
    const auto u = static_cast<std::uint32_t>(x);
    return static_cast<std::int32_t>(x < 0 ? 0u - u : u);
  }
};

// Integer division without UB.
struct IntDivide {
  template <class T>
  T operator()(T x, T y) const {
    if (y == 0) return 0;
    if constexpr (std::is_signed_v<T>) {
      if (y == -1)
        return static_cast<T>(0u - static_cast<std::make_unsigned_t<T>>(x));
    }
    return static_cast<T>(x / y);
  }
};

// float -> integer: truncates toward zero, clamps to the target range, NaN ->
// 0.
template <class To>
struct SaturatingCast {
  template <class From>
  To operator()(From x) const {
    constexpr auto lo = static_cast<From>(std::numeric_limits<To>::min());
    constexpr auto hi = static_cast<From>(std::numeric_limits<To>::max());
    if (x != x) return 0;
    if (x <= lo) return std::numeric_limits<To>::min();
    if (x >= hi) return std::numeric_limits<To>::max();
    return static_cast<To>(x);
  }
};

// std::pow, not xsimd::pow (xsimd 8 gives 0 for 0^0, NaN for 1^NaN and inf^0,
// 0 for 0^-1; IEEE and numpy say 1, 1, 1 and inf).
struct Power {
  template <class T>
  T operator()(T x, T y) const {
    return std::pow(x, y);
  }
};

// i32 arithmetic that may overflow runs on u32: same bits, wrapping, no UB.
template <class T>
using Wrapping =
    std::conditional_t<std::is_same_v<T, std::int32_t>, std::uint32_t, T>;

// bool elements are handled as their bytes (always 0 or 1 in kiln).
template <class T>
using Stored = std::conditional_t<std::is_same_v<T, bool>, std::uint8_t, T>;

[[noreturn]] void unsupported(Prim p, DType d) {
  throw DTypeError(detail::str_cat(
      "[", name(p), "] the CPU backend has no kernel for dtype ", name(d)));
}

void check_host_dtypes(Prim p, std::span<const Array> inputs, const Aval& out) {
  for (const Array& in : inputs) check_host_dtype(p, in.dtype());
  check_host_dtype(p, out.dtype);
}

// ---- drivers: run an element functor `f` over flat operands or broadcast rows ----

// GCC vectorizes loops at -O3 only (at -O2 just the "very cheap" ones): this asks
// for it on the plain loops below.
#if defined(__GNUC__) && !defined(__clang__)
#define KILN_VECTORIZE [[gnu::optimize("tree-loop-vectorize")]]
#else
#define KILN_VECTORIZE
#endif

// out[i] = f(x[i]). `out` may be `x` itself (the fused kernels reuse chunks).
template <class In, class Out, class F>
KILN_VECTORIZE void map1(F f, const void* x, void* out, std::size_t n) {
  const In* a = static_cast<const In*>(x);
  Out* o = static_cast<Out*>(out);
  for (std::size_t i = 0; i < n; ++i) o[i] = static_cast<Out>(f(a[i]));
}

// out[i] = f(x[i]) on xsimd batches of T (f takes and gives a batch): full
// batches in place, the last partial one through a zero-padded copy, so each
// element's bits do not depend on its position.
template <class T, class F>
void map_batches(F f, const void* x, void* out, std::size_t n) {
  using B = xsimd::batch<T>;
  constexpr std::size_t kW = B::size;
  const T* a = static_cast<const T*>(x);
  T* o = static_cast<T*>(out);
  std::size_t i = 0;
  for (; i + kW <= n; i += kW) f(B::load_unaligned(a + i)).store_unaligned(o + i);
  if (i == n) return;
  alignas(64) T ta[kW] = {}, to[kW];
  std::memcpy(ta, a + i, (n - i) * sizeof(T));
  f(B::load_aligned(ta)).store_aligned(to);
  std::memcpy(o + i, to, (n - i) * sizeof(T));
}

// Below this many elements per output row, a broadcast runs the loops here
// rather than one SIMD kernel call per row (each call costs more than such a row).
constexpr std::size_t kMinRow = 8;

// The operands of a binary kernel: flat (n elements, each operand contiguous or
// one scalar, not both unless n == 1), or any numpy broadcast of two arrays
// (shapes set; the unfused path only).
struct BinaryArgs {
  const void* a = nullptr;
  const void* b = nullptr;
  void* out = nullptr;
  std::size_t n = 0;
  bool a_scalar = false, b_scalar = false;
  const Shape* a_shape = nullptr;
  const Shape* b_shape = nullptr;
  const Shape* shape = nullptr;  // the output's, when not flat
};

// out[i] = f(a[i], b[i]) over one row; A/B: the operand is contiguous (else
// one broadcast element).
template <class In, class Out, class F, bool A, bool B>
KILN_VECTORIZE void map2_row(F f, const In* a, const In* b, Out* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    out[i] = static_cast<Out>(f(a[A ? i : 0], b[B ? i : 0]));
  }
}

// out = f(a, b) over flat operands or broadcast rows (of any length: the loop
// has no per-row setup worth avoiding).
template <class In, class Out, class F>
void binary_apply(F f, const BinaryArgs& args) {
  const In* pa = static_cast<const In*>(args.a);
  const In* pb = static_cast<const In*>(args.b);
  Out* po = static_cast<Out*>(args.out);
  const auto row_op = [&](const std::array<std::size_t, 2>& off,
                          const std::array<std::size_t, 2>& step,
                          std::size_t out_off, std::size_t len) {
    const In* a = pa + off[0];
    const In* b = pb + off[1];
    Out* o = po + out_off;
    if (step[0] != 0 && step[1] != 0) return map2_row<In, Out, F, true, true>(f, a, b, o, len);
    if (step[0] != 0) return map2_row<In, Out, F, true, false>(f, a, b, o, len);
    if (step[1] != 0) return map2_row<In, Out, F, false, true>(f, a, b, o, len);
    map2_row<In, Out, F, false, false>(f, a, b, o, len);
  };
  if (args.shape == nullptr) {
    return row_op({0, 0}, {args.a_scalar ? 0u : 1u, args.b_scalar ? 0u : 1u}, 0, args.n);
  }
  BroadcastPlan<2>::make(*args.shape, {args.a_shape, args.b_shape}).for_each_row(row_op);
}

// One unary primitive P on dtype T. The chain covers every kUnary row (a row
// without a case fails the static_assert); a dtype the op does not take ends
// in unsupported() (the op's dtype rule refused it already).
template <class T, Prim P>
void unary_kernel(DType dtype, const void* a, void* out, std::size_t n) {
  using W = Wrapping<T>;
  constexpr bool kFloat = std::is_floating_point_v<T>;
  constexpr bool kInt = std::is_integral_v<T> && !std::is_same_v<T, bool>;
  constexpr bool kBool = std::is_same_v<T, bool>;
  // Float math on batches; `f` takes and gives an xsimd batch of T.
  const auto batches = [&](auto f) { map_batches<T>(f, a, out, n); };
  // Everything else element by element (map1), on T or its wrapping or stored type.
  if constexpr (kFloat && kFloatUnary<P>) {  // backends/cpu/float_ops.hpp
    return batches(FloatUnary<P>{});
  } else if constexpr (P == Prim::kAbs || P == Prim::kRelu) {
    if constexpr (kInt && std::is_unsigned_v<T>) {  // both are the identity on u32
      std::memcpy(out, a, n * sizeof(T));
      return;
    } else if constexpr (kInt && P == Prim::kAbs) {
      return map1<T, T>(WrappingAbs{}, a, out, n);
    } else if constexpr (kInt) {
      return map1<T, T>([](T x) { return x > T(0) ? x : T(0); }, a, out, n);
    }
  } else if constexpr (P == Prim::kBitwiseNot || P == Prim::kLogicalNot) {
    if constexpr (kBool) {
      return map1<std::uint8_t, std::uint8_t>(FlipBit{}, a, out, n);
    } else if constexpr (kInt && P == Prim::kBitwiseNot) {
      return map1<T, T>(BitNot{}, a, out, n);
    }
  } else if constexpr (P == Prim::kNeg) {
    if constexpr (kInt) return map1<W, W>([](W x) { return static_cast<W>(-x); }, a, out, n);
  } else if constexpr (kFloatUnary<P>) {
    // float only: other dtypes end in unsupported()
  } else {
    static_assert(kUnhandled<P>, "a unary primitive without a CPU kernel");
  }
  unsupported(P, dtype);
}

// A KILN_MATH2 row's scalar CPU kernel as an elementwise functor.
template <Prim P>
struct MathScalar {
  template <class T>
  T operator()(T x, T y) const {
    return MathDef<P>::cpu(x, y);
  }
};

// One binary primitive P on dtype T (every kBinary row; see unary_kernel).
template <class T, Prim P>
void binary_kernel(DType dtype, const BinaryArgs& args) {
  using S = Stored<T>;
  using W = Wrapping<T>;
  constexpr bool kFloat = std::is_floating_point_v<T>;
  constexpr bool kIntOrBool = std::is_integral_v<T>;  // bool (as bytes), i32, u32
  constexpr bool kInt = kIntOrBool && !std::is_same_v<T, bool>;
  const auto run = [&](auto f) { binary_apply<S, S>(f, args); };
  const auto wrapping = [&](auto f) { binary_apply<W, W>(f, args); };
  // Comparisons write bool bytes.
  const auto compare = [&](auto f) { binary_apply<S, std::uint8_t>(f, args); };
  if constexpr (has_trait(P, PrimTrait::kMath)) {
    // A binary MathDef's CPU kernel is scalar, applied element by element.
    if constexpr (kFloat) return run(MathScalar<P>{});
  } else if constexpr (P == Prim::kEq) {
    return compare(std::equal_to<>{});
  } else if constexpr (P == Prim::kNe) {
    return compare(std::not_equal_to<>{});
  } else if constexpr (P == Prim::kLt) {
    return compare(std::less<>{});
  } else if constexpr (P == Prim::kLe) {
    return compare(std::less_equal<>{});
  } else if constexpr (P == Prim::kGt) {
    return compare(std::greater<>{});
  } else if constexpr (P == Prim::kGe) {
    return compare(std::greater_equal<>{});
  } else if constexpr (P == Prim::kMaximum) {
    return run(NanMaximum{});
  } else if constexpr (P == Prim::kMinimum) {
    return run(NanMinimum{});
  } else if constexpr (P == Prim::kLogicalAnd || P == Prim::kBitwiseAnd) {
    if constexpr (kIntOrBool) return run(BitAnd{});
  } else if constexpr (P == Prim::kLogicalOr || P == Prim::kBitwiseOr) {
    if constexpr (kIntOrBool) return run(BitOr{});
  } else if constexpr (P == Prim::kBitwiseXor) {
    if constexpr (kIntOrBool) return run(BitXor{});
  } else if constexpr (P == Prim::kShiftLeft) {
    if constexpr (kInt) return run(ShiftLeft{});
  } else if constexpr (P == Prim::kShiftRightLogical) {
    if constexpr (kInt) return run(ShiftRightLogical{});
  } else if constexpr (P == Prim::kAdd) {
    if constexpr (!std::is_same_v<T, bool>) return wrapping(std::plus<W>{});
  } else if constexpr (P == Prim::kSub) {
    if constexpr (!std::is_same_v<T, bool>) return wrapping(std::minus<W>{});
  } else if constexpr (P == Prim::kMul) {
    if constexpr (!std::is_same_v<T, bool>) return wrapping(std::multiplies<W>{});
  } else if constexpr (P == Prim::kDiv) {
    if constexpr (kFloat) {
      return run(std::divides<T>{});
    } else if constexpr (kInt) {
      return run(IntDivide{});
    }
  } else if constexpr (P == Prim::kPow) {
    if constexpr (kFloat) return run(Power{});
  } else {
    static_assert(kUnhandled<P>, "a binary primitive without a CPU kernel");
  }
  unsupported(P, dtype);
}

bool is_comparison(Prim p) { return has_trait(p, PrimTrait::kComparison); }

// Copies out[0] to out[1..n) (elements of `size` bytes).
void fill_from_first(void* out, std::size_t size, std::size_t n) {
  visit_size(size, [&](auto zero) {
    using U = decltype(zero);
    auto* o = static_cast<U*>(out);
    std::fill(o + 1, o + n, o[0]);
  });
}

// The generic kernels as FlatKernels (dtype and primitive fixed at compile time).
template <class T, Prim P>
void generic_unary(const FlatOperand* in, void* out, std::size_t n) {
  unary_kernel<T, P>(dtype_of_v<T>, in[0].data, out, n);
}
template <class T, Prim P>
void generic_binary(const FlatOperand* in, void* out, std::size_t n) {
  BinaryArgs args;
  args.a = in[0].data;
  args.b = in[1].data;
  args.out = out;
  args.n = n;
  args.a_scalar = in[0].scalar;
  args.b_scalar = in[1].scalar;
  binary_kernel<T, P>(dtype_of_v<T>, args);
}
template <class From, class To>
void generic_astype(const FlatOperand* in, void* out, std::size_t n) {
  using F = Stored<From>;
  using T = Stored<To>;
  if constexpr (std::is_same_v<To, bool>) {  // numpy: nonzero (and NaN) is true
    map1<F, T>([](F x) { return x != F(0); }, in[0].data, out, n);
  } else if constexpr (std::is_floating_point_v<F> && std::is_integral_v<T>) {
    map1<F, T>(SaturatingCast<T>{}, in[0].data, out, n);
  } else {
    map1<F, T>([](F x) { return static_cast<T>(x); }, in[0].data, out, n);
  }
}

FlatKernel generic_kernel(Prim p, DType in, DType out) {
  return visit_dtype(in, [&](auto zero) -> FlatKernel {
    using T = decltype(zero);
    switch (family(p)) {
      case PrimFamily::kUnary:
        return visit_family<PrimFamily::kUnary>(
            p, [&]<Prim P>(PrimC<P>) -> FlatKernel { return generic_unary<T, P>; });
      case PrimFamily::kBinary:
        return visit_family<PrimFamily::kBinary>(
            p, [&]<Prim P>(PrimC<P>) -> FlatKernel { return generic_binary<T, P>; });
      case PrimFamily::kAstype:
        return visit_dtype(out, [&](auto to) -> FlatKernel {
          return generic_astype<T, decltype(to)>;
        });
      default:
        break;
    }
    // where has a SIMD kernel for every host dtype at every level.
    unsupported(p, in);
  });
}

}  // namespace

FlatKernel reference_kernel(Prim p, DType in, DType out) { return generic_kernel(p, in, out); }

void check_host_dtype(Prim p, DType d) {
  if (is_16bit_float(d)) {
    throw DTypeError(detail::str_cat(
        "[", name(p), "] ", name(d),
        " is not supported by the CPU kernels; compute in f32 "
        "(astype on a device with f16) or move the array to such a device"));
  }
}

FlatKernel flat_kernel(Prim p, DType in, DType out) {
  if (p == Prim::kAstype) {  // f16/bf16 <-> f32: the fused interpreter's conversions
    if (const FlatKernel k = half_astype_kernel(in, out)) return k;
  }
  check_host_dtype(p, in);
  check_host_dtype(p, out);
  if (const FlatKernel k = simd_kernel(p, in, out)) return k;
  return generic_kernel(p, in, out);
}

// Runs `k` over n elements, split over the thread pool when n is large (each
// element is computed the same way whichever task has it). `esize`: the
// operands' element sizes, then the result's.
template <std::size_t N>
void run_flat(FlatKernel k, const std::array<FlatOperand, N>& in,
              const std::array<std::size_t, N + 1>& esize, void* out, std::size_t n) {
  // Elements per task: as the fused kernels' kParallelGrain (fused.cpp).
  constexpr std::size_t kGrain = std::size_t{1} << 14;
  const std::size_t tasks = n / kGrain;
  if (tasks < 2) return k(in.data(), out, n);
  parallel_for(tasks, [&](std::size_t t) {
    const std::size_t lo = n * t / tasks / 64 * 64;
    const std::size_t hi = t + 1 == tasks ? n : n * (t + 1) / tasks / 64 * 64;
    std::array<FlatOperand, N> part = in;
    for (std::size_t i = 0; i < N; ++i) {
      if (!part[i].scalar) part[i].data = static_cast<const std::byte*>(part[i].data) + lo * esize[i];
    }
    k(part.data(), static_cast<std::byte*>(out) + lo * esize[N], hi - lo);
  });
}

void unary_flat(Prim p, DType dtype, const void* x, void* out, std::size_t n) {
  const std::size_t e = size_of(dtype);
  run_flat<1>(flat_kernel(p, dtype, dtype), {FlatOperand{x, false}}, {e, e}, out, n);
}

void binary_flat(Prim p, DType in, FlatOperand a, FlatOperand b, void* out,
                 std::size_t n) {
  if (a.scalar && b.scalar && n > 1) {  // one element, repeated
    binary_flat(p, in, {a.data, false}, {b.data, false}, out, 1);
    return fill_from_first(out, is_comparison(p) ? 1 : size_of(in), n);
  }
  const DType to = is_comparison(p) ? DType::kBool : in;
  run_flat<2>(flat_kernel(p, in, to), {a, b}, {size_of(in), size_of(in), size_of(to)}, out, n);
}

void where_flat(DType dtype, FlatOperand c, FlatOperand a, FlatOperand b,
                void* out, std::size_t n) {
  const std::size_t e = size_of(dtype);
  run_flat<3>(flat_kernel(Prim::kWhere, dtype, dtype), {c, a, b}, {1, e, e, e}, out, n);
}

void astype_flat(DType from, DType to, const void* x, void* out, std::size_t n) {
  run_flat<1>(flat_kernel(Prim::kAstype, from, to), {FlatOperand{x, false}},
              {size_of(from), size_of(to)}, out, n);
}

std::shared_ptr<Buffer> eval_unary(Prim p, const Params&,
                                   std::span<const Array> inputs,
                                   const Aval& out) {
  check_host_dtypes(p, inputs, out);
  auto buf = allocate(out);
  if (inputs[0].size() == 0) return buf;
  unary_flat(p, inputs[0].dtype(), inputs[0].buffer()->host_data(), buf->host_data(),
             static_cast<std::size_t>(inputs[0].size()));
  return buf;
}

std::shared_ptr<Buffer> eval_binary(Prim p, const Params&,
                                    std::span<const Array> inputs,
                                    const Aval& out) {
  check_host_dtypes(p, inputs, out);
  auto buf = allocate(out);
  const auto n = static_cast<std::size_t>(numel(out.shape));
  if (n == 0) return buf;
  const Array& a = inputs[0];
  const Array& b = inputs[1];
  const auto na = static_cast<std::size_t>(a.size());
  const auto nb = static_cast<std::size_t>(b.size());
  BinaryArgs args;
  args.a = a.buffer()->host_data();
  args.b = b.buffer()->host_data();
  args.out = buf->host_data();
  args.n = n;
  args.a_scalar = na != n;
  args.b_scalar = nb != n;
  const bool flat = (na == n || na == 1) && (nb == n || nb == 1);
  if (flat) {
    binary_flat(p, a.dtype(), {args.a, args.a_scalar}, {args.b, args.b_scalar}, args.out, n);
    return buf;
  }
  args.a_shape = &a.shape();
  args.b_shape = &b.shape();
  args.shape = &out.shape;
  if (const FlatKernel k = simd_kernel(p, a.dtype(), out.dtype)) {
    const auto plan = BroadcastPlan<2>::make(out.shape, {&a.shape(), &b.shape()});
    if (plan.row_length() >= kMinRow) {  // rows through the SIMD kernel
      const auto* pa = static_cast<const std::byte*>(args.a);
      const auto* pb = static_cast<const std::byte*>(args.b);
      auto* po = static_cast<std::byte*>(args.out);
      const std::size_t ea = size_of(a.dtype()), eo = size_of(out.dtype);
      plan.for_each_row([&](const std::array<std::size_t, 2>& off,
                            const std::array<std::size_t, 2>& step, std::size_t out_off,
                            std::size_t len) {
        const FlatOperand ops[] = {{pa + off[0] * ea, step[0] == 0},
                                   {pb + off[1] * ea, step[1] == 0}};
        k(ops, po + out_off * eo, len);
      });
      return buf;
    }
  }
  visit_dtype(a.dtype(), [&](auto zero) {
    visit_family<PrimFamily::kBinary>(p, [&]<Prim P>(PrimC<P>) {
      binary_kernel<decltype(zero), P>(a.dtype(), args);
    });
  });
  return buf;
}

std::shared_ptr<Buffer> eval_where(Prim p, const Params&,
                                   std::span<const Array> inputs,
                                   const Aval& out) {
  check_host_dtypes(p, inputs, out);
  auto buf = allocate(out);
  if (numel(out.shape) == 0) return buf;
  const FlatKernel k = flat_kernel(p, out.dtype, out.dtype);
  const std::size_t e = size_of(out.dtype);
  const auto* pc = static_cast<const std::byte*>(inputs[0].buffer()->host_data());
  const auto* pa = static_cast<const std::byte*>(inputs[1].buffer()->host_data());
  const auto* pb = static_cast<const std::byte*>(inputs[2].buffer()->host_data());
  auto* po = static_cast<std::byte*>(buf->host_data());
  const auto plan = BroadcastPlan<3>::make(
      out.shape, {&inputs[0].shape(), &inputs[1].shape(), &inputs[2].shape()});
  plan.for_each_row([&](const std::array<std::size_t, 3>& off,
                        const std::array<std::size_t, 3>& step, std::size_t out_off,
                        std::size_t len) {
    const FlatOperand ops[] = {{pc + off[0], step[0] == 0},
                               {pa + off[1] * e, step[1] == 0},
                               {pb + off[2] * e, step[2] == 0}};
    k(ops, po + out_off * e, len);
  });
  return buf;
}

std::shared_ptr<Buffer> eval_astype(Prim p, const Params&,
                                    std::span<const Array> inputs,
                                    const Aval& out) {
  check_host_dtypes(p, inputs, out);
  const bool bitcast = visit_family<PrimFamily::kAstype>(p, [&]<Prim P>(PrimC<P>) {
    static_assert(P == Prim::kAstype || P == Prim::kBitcast,
                  "a conversion primitive without a CPU kernel");
    return P == Prim::kBitcast;
  });
  // bitcast keeps the bytes and arrays are immutable: share the buffer.
  if (bitcast) return inputs[0].buffer();
  auto buf = allocate(out);
  const Array& a = inputs[0];
  const auto n = static_cast<std::size_t>(a.size());
  if (n == 0) return buf;
  astype_flat(a.dtype(), out.dtype, a.buffer()->host_data(), buf->host_data(), n);
  return buf;
}

}  // namespace kiln::cpu
