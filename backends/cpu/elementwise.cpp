// CPU kernels for the elementwise primitives: unary, binary, where and astype.
//
// Each op is one xtensor expression, or one element functor with a scalar
// operator() and an xsimd simd_apply, written once for every dtype it accepts.
// Operands with as many elements as the result (same shape up to leading 1s)
// and 1-element operands take a flat 1-D path that xtensor assigns linearly
// with SIMD: the common case and the cheapest to dispatch. Other broadcasts are
// cut into contiguous output rows (see broadcast.hpp) that take the same flat
// path, so x - max(x, -1, true) stays vectorized; short rows use xtensor's
// broadcasting.
//
// Integer results are defined for every input, never UB (UBSan runs in CI): i32
// add/subtract/multiply/neg/abs wrap modulo 2^32 (they run on the u32 bit
// pattern), integer division rounds toward zero with x / 0 == 0 and
// INT_MIN / -1 == INT_MIN, and float -> integer conversion saturates (NaN ->
// 0). Shifts follow XLA: an amount outside [0, 32) gives 0 (in C++ it would be
// UB), and shift_right_logical shifts the bit pattern of i32 too.
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <xtensor/xadapt.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xnoalias.hpp>
#include <xtensor/xoperation.hpp>

#include "kiln/backends/cpu/broadcast.hpp"
#include "kiln/backends/cpu/cpu_backend.hpp"
#include "kiln/backends/cpu/nan_minmax.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

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

// where(c, x, y) on byte conditions; scalar, as c and x differ in lane width.
struct Select {
  template <class T>
  T operator()(std::uint8_t c, T x, T y) const {
    return c != 0 ? x : y;
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
// A row of `n` elements read with stride 0 (a broadcast scalar) or 1. (xtensor
// insists that the buffer size match the shape; with stride 0 only p[0] is
// read.)
template <class S>
auto row(S* p, std::size_t n, std::size_t stride) {
  return xt::adapt(static_cast<S*>(p), n, xt::no_ownership(), Extent1{n},
                   Extent1{stride});
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
  auto check = [&](DType d) {
    if (d == DType::kF16) {
      throw DTypeError(detail::str_cat(
          "[", name(p),
          "] f16 is not supported by the CPU backend; compute in f32 "
          "(astype on a device with f16) or move the array to such a device"));
    }
  };
  for (const Array& in : inputs) check(in.dtype());
  check(out.dtype);
}

// ---- drivers: evaluate an expression builder `f` over adapted operands ----

template <class S, class F>
void unary_apply(F f, const Array& a, void* out) {
  const auto n = static_cast<std::size_t>(a.size());
  const auto x = flat(elements<S>(a), n);
  auto o = flat(static_cast<S*>(out), n);
  xt::noalias(o) = f(x);
}

// Below this many elements per output row, broadcasting goes through xtensor's
// steppers rather than one flat assignment per row (each costs ~30 ns): measured
// on (4096, 8) + (4096, 1) rows win 2x, on (65536, 2) + (2,) steppers win 10x.
constexpr std::size_t kMinRow = 8;

// out = f(x, y) with numpy broadcasting. Scalars are passed as lvalues that
// outlive the assignment (xtensor keeps a reference to them).
template <class In, class Out, class F>
void binary_apply(F f, const Array& a, const Array& b, void* out,
                  const Shape& shape) {
  const In* pa = elements<In>(a);
  const In* pb = elements<In>(b);
  Out* po = static_cast<Out*>(out);
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
  const auto n = static_cast<std::size_t>(numel(shape));
  const auto na = static_cast<std::size_t>(a.size());
  const auto nb = static_cast<std::size_t>(b.size());
  if ((na == n || na == 1) && (nb == n || nb == 1)) {
    return row_op({0, 0}, {na == n ? 1u : 0u, nb == n ? 1u : 0u}, 0, n);
  }
  const auto plan = BroadcastPlan<2>::make(shape, {&a.shape(), &b.shape()});
  if (plan.row_length() >= kMinRow) return plan.for_each_row(row_op);
  auto o = shaped(po, plan.extents);
  xt::noalias(o) = f(shaped(pa, plan.operand_extents(0)),
                     shaped(pb, plan.operand_extents(1)));
}

template <class T>
void unary_kernel(Prim p, const Array& a, void* out) {
  using W = Wrapping<T>;
  if constexpr (std::is_floating_point_v<T>) {
    switch (p) {
      case Prim::kExp:
        return unary_apply<T>([](const auto& x) { return xt::exp(x); }, a, out);
      case Prim::kLog:
        return unary_apply<T>([](const auto& x) { return xt::log(x); }, a, out);
      case Prim::kTanh:
        return unary_apply<T>([](const auto& x) { return xt::tanh(x); }, a,
                              out);
      case Prim::kSqrt:
        return unary_apply<T>([](const auto& x) { return xt::sqrt(x); }, a,
                              out);
      case Prim::kRsqrt:
        return unary_apply<T>([](const auto& x) { return T(1) / xt::sqrt(x); },
                              a, out);
      case Prim::kSigmoid:
        // exp(-x) overflows to inf for very negative x, which still gives 0.
        return unary_apply<T>(
            [](const auto& x) { return T(1) / (T(1) + xt::exp(-x)); }, a, out);
      case Prim::kAbs:
        return unary_apply<T>([](const auto& x) { return xt::abs(x); }, a, out);
      case Prim::kRelu: {
        static constexpr T kZero = 0;
        return unary_apply<T>(
            [](const auto& x) { return apply<NanMaximum>(x, kZero); }, a, out);
      }
      default:
        break;
    }
  }
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    switch (p) {
      case Prim::kBitwiseNot:
        return unary_apply<T>([](const auto& x) { return apply<BitNot>(x); },
                              a, out);
      case Prim::kAbs:
      case Prim::kRelu:
        if constexpr (std::is_unsigned_v<T>) {  // both are the identity on u32
          std::memcpy(out, elements<T>(a), a.nbytes());
          return;
        } else if (p == Prim::kAbs) {
          return unary_apply<T>(
              [](const auto& x) { return apply<WrappingAbs>(x); }, a, out);
        } else {
          static constexpr T kZero = 0;
          return unary_apply<T>(
              [](const auto& x) { return xt::maximum(x, kZero); }, a, out);
        }
      default:
        break;
    }
  }
  if constexpr (std::is_same_v<T, bool>) {
    if (p == Prim::kLogicalNot || p == Prim::kBitwiseNot) {
      return unary_apply<std::uint8_t>(
          [](const auto& x) { return apply<FlipBit>(x); }, a, out);
    }
  } else if (p == Prim::kNeg) {
    return unary_apply<W>([](const auto& x) { return -x; }, a, out);
  }
  unsupported(p, a.dtype());
}

template <class T>
void binary_kernel(Prim p, const Array& a, const Array& b, void* out,
                   const Shape& shape) {
  using S = Stored<T>;
  using W = Wrapping<T>;
  const auto run = [&](auto f) { binary_apply<S, S>(f, a, b, out, shape); };
  // Comparisons write bool bytes; xtensor converts a batch of comparisons
  // fastest through an explicit cast.
  const auto compare = [&](auto f) {
    binary_apply<S, std::uint8_t>(
        [&f](const auto& x, const auto& y) {
          return xt::cast<std::uint8_t>(f(x, y));
        },
        a, b, out, shape);
  };
  switch (p) {
    case Prim::kEq:
      return compare(
          [](const auto& x, const auto& y) { return xt::equal(x, y); });
    case Prim::kNe:
      return compare(
          [](const auto& x, const auto& y) { return xt::not_equal(x, y); });
    case Prim::kLt:
      return compare(
          [](const auto& x, const auto& y) { return xt::less(x, y); });
    case Prim::kLe:
      return compare(
          [](const auto& x, const auto& y) { return xt::less_equal(x, y); });
    case Prim::kGt:
      return compare(
          [](const auto& x, const auto& y) { return xt::greater(x, y); });
    case Prim::kGe:
      return compare(
          [](const auto& x, const auto& y) { return xt::greater_equal(x, y); });
    case Prim::kMaximum:
      return run(
          [](const auto& x, const auto& y) { return apply<NanMaximum>(x, y); });
    case Prim::kMinimum:
      return run(
          [](const auto& x, const auto& y) { return apply<NanMinimum>(x, y); });
    default:
      break;
  }
  if constexpr (std::is_integral_v<T>) {  // bool (as bytes), i32, u32
    switch (p) {
      case Prim::kLogicalAnd:
      case Prim::kBitwiseAnd:
        return run(
            [](const auto& x, const auto& y) { return apply<BitAnd>(x, y); });
      case Prim::kLogicalOr:
      case Prim::kBitwiseOr:
        return run(
            [](const auto& x, const auto& y) { return apply<BitOr>(x, y); });
      case Prim::kBitwiseXor:
        return run(
            [](const auto& x, const auto& y) { return apply<BitXor>(x, y); });
      default:
        break;
    }
  }
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (p == Prim::kShiftLeft) {
      return run(
          [](const auto& x, const auto& y) { return apply<ShiftLeft>(x, y); });
    }
    if (p == Prim::kShiftRightLogical) {
      return run([](const auto& x, const auto& y) {
        return apply<ShiftRightLogical>(x, y);
      });
    }
  }
  if constexpr (!std::is_same_v<T, bool>) {
    const auto wrapping = [&](auto f) {
      binary_apply<W, W>(f, a, b, out, shape);
    };
    switch (p) {
      case Prim::kAdd:
        return wrapping([](const auto& x, const auto& y) { return x + y; });
      case Prim::kSub:
        return wrapping([](const auto& x, const auto& y) { return x - y; });
      case Prim::kMul:
        return wrapping([](const auto& x, const auto& y) { return x * y; });
      case Prim::kDiv:
        if constexpr (std::is_floating_point_v<T>) {
          return run([](const auto& x, const auto& y) { return x / y; });
        } else {
          return run([](const auto& x, const auto& y) {
            return apply<IntDivide>(x, y);
          });
        }
      case Prim::kPow:
        if constexpr (std::is_floating_point_v<T>) {
          return run(
              [](const auto& x, const auto& y) { return apply<Power>(x, y); });
        }
        break;
      default:
        break;
    }
  }
  unsupported(p, a.dtype());
}

}  // namespace

std::shared_ptr<Buffer> eval_unary(Prim p, const Params&,
                                   std::span<const Array> inputs,
                                   const Aval& out) {
  check_host_dtypes(p, inputs, out);
  auto buf = allocate(out);
  if (inputs[0].size() == 0) return buf;
  visit_dtype(inputs[0].dtype(), [&](auto zero) {
    unary_kernel<decltype(zero)>(p, inputs[0], buf->host_data());
  });
  return buf;
}

std::shared_ptr<Buffer> eval_binary(Prim p, const Params&,
                                    std::span<const Array> inputs,
                                    const Aval& out) {
  check_host_dtypes(p, inputs, out);
  auto buf = allocate(out);
  if (numel(out.shape) == 0) return buf;
  visit_dtype(inputs[0].dtype(), [&](auto zero) {
    binary_kernel<decltype(zero)>(p, inputs[0], inputs[1], buf->host_data(),
                                  out.shape);
  });
  return buf;
}

std::shared_ptr<Buffer> eval_where(Prim p, const Params&,
                                   std::span<const Array> inputs,
                                   const Aval& out) {
  check_host_dtypes(p, inputs, out);
  auto buf = allocate(out);
  if (numel(out.shape) == 0) return buf;
  visit_dtype(out.dtype, [&](auto zero) {
    using S = Stored<decltype(zero)>;
    const auto* pc = elements<std::uint8_t>(inputs[0]);
    const auto* pa = elements<S>(inputs[1]);
    const auto* pb = elements<S>(inputs[2]);
    auto* po = static_cast<S*>(buf->host_data());
    const auto plan = BroadcastPlan<3>::make(
        out.shape,
        {&inputs[0].shape(), &inputs[1].shape(), &inputs[2].shape()});
    plan.for_each_row([&](const std::array<std::size_t, 3>& off,
                          const std::array<std::size_t, 3>& step,
                          std::size_t out_off, std::size_t len) {
      auto o = flat(po + out_off, len);
      xt::noalias(o) = apply<Select>(row(pc + off[0], len, step[0]),
                                     row(pa + off[1], len, step[1]),
                                     row(pb + off[2], len, step[2]));
    });
  });
  return buf;
}

std::shared_ptr<Buffer> eval_astype(Prim p, const Params&,
                                    std::span<const Array> inputs,
                                    const Aval& out) {
  check_host_dtypes(p, inputs, out);
  // bitcast keeps the bytes and arrays are immutable: share the buffer.
  if (p == Prim::kBitcast) return inputs[0].buffer();
  auto buf = allocate(out);
  const Array& a = inputs[0];
  const auto n = static_cast<std::size_t>(a.size());
  if (n == 0) return buf;
  visit_dtype(a.dtype(), [&](auto from_zero) {
    visit_dtype(out.dtype, [&](auto to_zero) {
      using From = Stored<decltype(from_zero)>;
      using To = Stored<decltype(to_zero)>;
      const auto x = flat(elements<From>(a), n);
      auto o = flat(static_cast<To*>(buf->host_data()), n);
      if constexpr (std::is_same_v<decltype(to_zero), bool>) {
        static constexpr From kZero = 0;  // numpy: nonzero (and NaN) is true
        xt::noalias(o) = xt::cast<std::uint8_t>(xt::not_equal(x, kZero));
      } else if constexpr (std::is_floating_point_v<From> &&
                           std::is_integral_v<To>) {
        xt::noalias(o) = apply<SaturatingCast<To>>(x);
      } else {
        xt::noalias(o) = xt::cast<To>(x);
      }
    });
  });
  return buf;
}

}  // namespace kiln::cpu
