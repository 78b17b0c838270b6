// CPU kernels for the elementwise primitives: unary, binary, where and astype.
//
// The common ops have SIMD kernels per x86-64 level (simd_kernels.cpp, picked by
// flat_kernel()); the generic kernels here cover the rest (math functions,
// integer division and shifts, power, ...) and every op on a machine level
// without one. Each op is one xtensor expression, or one element functor with a scalar
// operator() and an xsimd simd_apply, written once for every dtype it accepts.
// Operands with as many elements as the result (same shape up to leading 1s)
// and 1-element operands take a flat 1-D path that xtensor assigns linearly
// with SIMD: the common case and the cheapest to dispatch. Other broadcasts are
// cut into contiguous output rows (see broadcast.hpp) that take the same flat
// path, so x - max(x, -1, true) stays vectorized; short rows use xtensor's
// broadcasting. Comparisons, whose operands and results differ in lane width,
// are plain loops over rows that GCC vectorizes (KILN_VECTORIZE).
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
#include <xtensor/xadapt.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xnoalias.hpp>
#include <xtensor/xoperation.hpp>

#include "kiln/backends/cpu/bits.hpp"
#include "kiln/backends/cpu/broadcast.hpp"
#include "kiln/backends/cpu/cpu_backend.hpp"
#include "kiln/backends/cpu/nan_minmax.hpp"
#include "kiln/backends/cpu/simd.hpp"
#include "kiln/dsl/unary_math.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"
#include "kiln/runtime/thread_pool.hpp"

namespace kiln::cpu {
namespace {

// ---- element functors: operator() on scalars, simd_apply on xsimd batches
// ----

// Builds the xtensor function of a functor type, the way xtensor builds its own
// (xt::make_lambda_xfunction cannot vectorize functors of more than one
// argument).
template <class F, class... E>
auto apply(E&&... e) {
  return xt::detail::make_xfunction<F>(std::forward<E>(e)...);
}


// Logical ops on bool elements stored as 0/1 bytes: bitwise, 16 lanes at a
// time.
struct BitAnd {
  template <class T>
  T operator()(T x, T y) const {
    return static_cast<T>(x & y);
  }
  template <class B>
  B simd_apply(const B& x, const B& y) const {
    return x & y;
  }
};
struct BitOr {
  template <class T>
  T operator()(T x, T y) const {
    return static_cast<T>(x | y);
  }
  template <class B>
  B simd_apply(const B& x, const B& y) const {
    return x | y;
  }
};
struct BitXor {
  template <class T>
  T operator()(T x, T y) const {
    return static_cast<T>(x ^ y);
  }
  template <class B>
  B simd_apply(const B& x, const B& y) const {
    return x ^ y;
  }
};
struct BitNot {
  template <class T>
  T operator()(T x) const {
    return static_cast<T>(~x);
  }
  template <class B>
  B simd_apply(const B& x) const {
    return ~x;
  }
};

// Shifts on the unsigned bit pattern; amounts outside [0, 32) (negative i32
// amounts become huge unsigned ones) give 0 rather than UB. Scalar only: xsimd 8
// has no lane-wise variable shift on every target we build for.
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
  template <class B>
  B simd_apply(const B& x) const {
    return x ^ B(1);
  }
};

// |x| for i32 with |INT_MIN| == INT_MIN (std::abs would be UB there).
struct WrappingAbs {
  std::int32_t operator()(std::int32_t x) const {
    const auto u = static_cast<std::uint32_t>(x);
    return static_cast<std::int32_t>(x < 0 ? 0u - u : u);
  }
  template <class B>
  B simd_apply(const B& x) const {
    return xsimd::abs(x);  // wraps like the scalar version
  }
};

// Integer division without UB; scalar only (there is no SIMD integer division).
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

// std::pow, scalar only: xsimd::pow (xsimd 8) gives 0 for 0^0, NaN for 1^NaN
// and inf^0, 0 for 0^-1; IEEE (and numpy) say 1, 1, 1 and inf.
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

// bool elements are handled as their bytes (always 0 or 1 in kiln): xtensor's
// SIMD path cannot load bool arrays into most expressions, bytes vectorize.
template <class T>
using Stored = std::conditional_t<std::is_same_v<T, bool>, std::uint8_t, T>;

// ---- adapting buffers ----

using Extent1 = std::array<std::size_t, 1>;

template <class S>
const S* elements(const Array& a) {
  return static_cast<const S*>(a.buffer()->host_data());
}
// S may be const: inputs are read-only views, outputs writable ones. The
// pointer goes to xt::adapt as a prvalue: given an lvalue, the adaptor would
// keep a reference to the variable rather than a copy of the pointer.
template <class S>
auto flat(S* p, std::size_t n) {
  return xt::adapt(static_cast<S*>(p), n, xt::no_ownership(), Extent1{n});
}
template <class S>
auto shaped(S* p, const ShapeVec& shape) {
  return xt::adapt(static_cast<S*>(p), xt::compute_size(shape),
                   xt::no_ownership(), shape);
}

[[noreturn]] void unsupported(Prim p, DType d) {
  throw DTypeError(detail::str_cat(
      "[", name(p), "] the CPU backend has no kernel for dtype ", name(d)));
}

void check_host_dtypes(Prim p, std::span<const Array> inputs, const Aval& out) {
  for (const Array& in : inputs) check_host_dtype(p, in.dtype());
  check_host_dtype(p, out.dtype);
}

// ---- drivers: evaluate an expression builder `f` over adapted operands ----

template <class S, class F>
void unary_apply(F f, const void* x, void* out, std::size_t n) {
  const auto xv = flat(static_cast<const S*>(x), n);
  auto o = flat(static_cast<S*>(out), n);
  xt::noalias(o) = f(xv);
}

// Below this many elements per output row, broadcasting goes through xtensor's
// steppers rather than one flat assignment per row (each costs ~30 ns): measured
// on (4096, 8) + (4096, 1) rows win 2x, on (65536, 2) + (2,) steppers win 10x.
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

// out = f(x, y). Scalars are passed as lvalues that outlive the assignment
// (xtensor keeps a reference to them).
template <class In, class Out, class F>
void binary_apply(F f, const BinaryArgs& args) {
  const In* pa = static_cast<const In*>(args.a);
  const In* pb = static_cast<const In*>(args.b);
  Out* po = static_cast<Out*>(args.out);
  // One contiguous output row; operand k advances by step[k] (0 or 1).
  const auto row_op = [&](const std::array<std::size_t, 2>& off,
                          const std::array<std::size_t, 2>& step,
                          std::size_t out_off, std::size_t len) {
    auto o = flat(po + out_off, len);
    if (step[0] != 0 && step[1] != 0) {
      xt::noalias(o) = f(flat(pa + off[0], len), flat(pb + off[1], len));
    } else if (step[0] != 0) {
      const In y = pb[off[1]];
      xt::noalias(o) = f(flat(pa + off[0], len), y);
    } else {
      const In x = pa[off[0]];
      xt::noalias(o) = f(x, flat(pb + off[1], len));
    }
  };
  if (args.shape == nullptr) {
    return row_op({0, 0}, {args.a_scalar ? 0u : 1u, args.b_scalar ? 0u : 1u},
                  0, args.n);
  }
  const auto plan = BroadcastPlan<2>::make(*args.shape, {args.a_shape, args.b_shape});
  if (plan.row_length() >= kMinRow) return plan.for_each_row(row_op);
  auto o = shaped(po, plan.extents);
  xt::noalias(o) = f(shaped(pa, plan.operand_extents(0)),
                     shaped(pb, plan.operand_extents(1)));
}

// GCC vectorizes loops at -O3 only (at -O2 just the "very cheap" ones): this asks
// for it on the few plain loops below, which xtensor cannot express with SIMD.
#if defined(__GNUC__) && !defined(__clang__)
#define KILN_VECTORIZE [[gnu::optimize("tree-loop-vectorize")]]
#else
#define KILN_VECTORIZE
#endif

// out[i] = f(a[i], b[i]) as bool bytes over one row; A/B: the operand is
// contiguous (else one broadcast element). `out` may not overlap the operands.
template <class In, class F, bool A, bool B>
KILN_VECTORIZE void compare_row(F f, const In* __restrict a, const In* __restrict b,
                                std::uint8_t* __restrict out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    out[i] = static_cast<std::uint8_t>(f(a[A ? i : 0], b[B ? i : 0]));
  }
}

// A comparison over flat operands or broadcast rows (rows of any length: the
// loop has no per-row setup worth avoiding).
template <class In, class F>
void compare_apply(F f, const BinaryArgs& args) {
  const In* pa = static_cast<const In*>(args.a);
  const In* pb = static_cast<const In*>(args.b);
  auto* po = static_cast<std::uint8_t*>(args.out);
  const auto row_op = [&](const std::array<std::size_t, 2>& off,
                          const std::array<std::size_t, 2>& step,
                          std::size_t out_off, std::size_t len) {
    const In* a = pa + off[0];
    const In* b = pb + off[1];
    std::uint8_t* o = po + out_off;
    if (step[0] != 0 && step[1] != 0) return compare_row<In, F, true, true>(f, a, b, o, len);
    if (step[0] != 0) return compare_row<In, F, true, false>(f, a, b, o, len);
    if (step[1] != 0) return compare_row<In, F, false, true>(f, a, b, o, len);
    compare_row<In, F, false, false>(f, a, b, o, len);
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
  const auto run = [&](auto f) { unary_apply<T>(f, a, out, n); };
  if constexpr (has_trait(P, PrimTrait::kMath)) {
    if constexpr (kFloat) return run([](const auto& x) { return MathDef<P>::cpu(x); });
  } else if constexpr (P == Prim::kExp) {
    if constexpr (kFloat) return run([](const auto& x) { return xt::exp(x); });
  } else if constexpr (P == Prim::kLog) {
    if constexpr (kFloat) return run([](const auto& x) { return xt::log(x); });
  } else if constexpr (P == Prim::kTanh) {
    if constexpr (kFloat) return run([](const auto& x) { return xt::tanh(x); });
  } else if constexpr (P == Prim::kSqrt) {
    if constexpr (kFloat) return run([](const auto& x) { return xt::sqrt(x); });
  } else if constexpr (P == Prim::kRsqrt) {
    if constexpr (kFloat) return run([](const auto& x) { return T(1) / xt::sqrt(x); });
  } else if constexpr (P == Prim::kSigmoid) {
    // exp(-x) overflows to inf for very negative x, which still gives 0.
    if constexpr (kFloat) return run([](const auto& x) { return T(1) / (T(1) + xt::exp(-x)); });
  } else if constexpr (P == Prim::kAbs || P == Prim::kRelu) {
    if constexpr (kFloat && P == Prim::kAbs) {
      return run([](const auto& x) { return xt::abs(x); });
    } else if constexpr (kFloat) {
      static constexpr T kZero = 0;
      return run([](const auto& x) { return apply<NanMaximum>(x, kZero); });
    } else if constexpr (kInt && std::is_unsigned_v<T>) {  // both are the identity on u32
      std::memcpy(out, a, n * sizeof(T));
      return;
    } else if constexpr (kInt && P == Prim::kAbs) {
      return run([](const auto& x) { return apply<WrappingAbs>(x); });
    } else if constexpr (kInt) {
      static constexpr T kZero = 0;
      return run([](const auto& x) { return xt::maximum(x, kZero); });
    }
  } else if constexpr (P == Prim::kBitwiseNot || P == Prim::kLogicalNot) {
    if constexpr (kBool) {
      return unary_apply<std::uint8_t>([](const auto& x) { return apply<FlipBit>(x); }, a, out, n);
    } else if constexpr (kInt && P == Prim::kBitwiseNot) {
      return run([](const auto& x) { return apply<BitNot>(x); });
    }
  } else if constexpr (P == Prim::kNeg) {
    if constexpr (!kBool) {
      return unary_apply<W>([](const auto& x) { return -x; }, a, out, n);
    }
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
  // Comparisons write bool bytes, in plain loops the compiler vectorizes
  // (xtensor's cast of comparison batches to bytes ran element by element).
  const auto compare = [&](auto f) { compare_apply<S>(f, args); };
  if constexpr (has_trait(P, PrimTrait::kMath)) {
    // A binary MathDef's CPU kernel is scalar, applied element by element.
    if constexpr (kFloat) return run([](const auto& x, const auto& y) { return apply<MathScalar<P>>(x, y); });
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
    return run([](const auto& x, const auto& y) { return apply<NanMaximum>(x, y); });
  } else if constexpr (P == Prim::kMinimum) {
    return run([](const auto& x, const auto& y) { return apply<NanMinimum>(x, y); });
  } else if constexpr (P == Prim::kLogicalAnd || P == Prim::kBitwiseAnd) {
    if constexpr (kIntOrBool) return run([](const auto& x, const auto& y) { return apply<BitAnd>(x, y); });
  } else if constexpr (P == Prim::kLogicalOr || P == Prim::kBitwiseOr) {
    if constexpr (kIntOrBool) return run([](const auto& x, const auto& y) { return apply<BitOr>(x, y); });
  } else if constexpr (P == Prim::kBitwiseXor) {
    if constexpr (kIntOrBool) return run([](const auto& x, const auto& y) { return apply<BitXor>(x, y); });
  } else if constexpr (P == Prim::kShiftLeft) {
    if constexpr (kInt) return run([](const auto& x, const auto& y) { return apply<ShiftLeft>(x, y); });
  } else if constexpr (P == Prim::kShiftRightLogical) {
    if constexpr (kInt) {
      return run([](const auto& x, const auto& y) { return apply<ShiftRightLogical>(x, y); });
    }
  } else if constexpr (P == Prim::kAdd) {
    if constexpr (!std::is_same_v<T, bool>) return wrapping([](const auto& x, const auto& y) { return x + y; });
  } else if constexpr (P == Prim::kSub) {
    if constexpr (!std::is_same_v<T, bool>) return wrapping([](const auto& x, const auto& y) { return x - y; });
  } else if constexpr (P == Prim::kMul) {
    if constexpr (!std::is_same_v<T, bool>) return wrapping([](const auto& x, const auto& y) { return x * y; });
  } else if constexpr (P == Prim::kDiv) {
    if constexpr (kFloat) {
      return run([](const auto& x, const auto& y) { return x / y; });
    } else if constexpr (kInt) {
      return run([](const auto& x, const auto& y) { return apply<IntDivide>(x, y); });
    }
  } else if constexpr (P == Prim::kPow) {
    if constexpr (kFloat) return run([](const auto& x, const auto& y) { return apply<Power>(x, y); });
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
  const auto xv = flat(static_cast<const F*>(in[0].data), n);
  auto o = flat(static_cast<T*>(out), n);
  if constexpr (std::is_same_v<To, bool>) {
    static constexpr F kZero = 0;  // numpy: nonzero (and NaN) is true
    xt::noalias(o) = xt::cast<std::uint8_t>(xt::not_equal(xv, kZero));
  } else if constexpr (std::is_floating_point_v<F> && std::is_integral_v<T>) {
    xt::noalias(o) = apply<SaturatingCast<T>>(xv);
  } else {
    xt::noalias(o) = xt::cast<T>(xv);
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
