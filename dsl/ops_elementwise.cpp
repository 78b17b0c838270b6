// Elementwise ops: the dtype and broadcasting rules of the unary, binary, where
// and astype primitives (docs/DTYPES.md), and the C++ operators over Array.
//
// These run on every eager op, so the success path builds no strings and
// touches the heap only for the result: messages are assembled once a check has
// failed.
#include <array>
#include <string>

#include "kiln/dsl/check.hpp"
#include "kiln/dsl/ops.hpp"
#include "kiln/dsl/primitive.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln {
namespace {

// Which dtypes an op accepts.
enum class Accepts : unsigned char {
  kAny, kNumeric, kFloating, kBool, kInteger, kIntegerOrBool
};

const Params& no_params() {
  static const Params kNone{NoParams{}};
  return kNone;
}

void check_present(std::string_view op, const Array& a, int position) {
  if (a.is_null()) {
    detail::check_not_none(op, a, detail::str_cat("argument ", position));
  }
}

bool accepts(Accepts kind, DType d) {
  switch (kind) {
    case Accepts::kAny:
      return true;
    case Accepts::kNumeric:
      return d != DType::kBool;
    case Accepts::kFloating:
      return is_inexact(d);
    case Accepts::kBool:
      return d == DType::kBool;
    case Accepts::kInteger:
      return is_integer(d);
    case Accepts::kIntegerOrBool:
      return is_integer(d) || d == DType::kBool;
  }
  return false;
}

// "for an operand of shape (2, 3)" / "for operands of shapes (2, 3) and (3,)".
std::string operand_shapes(std::span<const Array> in) {
  if (in.size() == 1) {
    return detail::str_cat("for an operand of shape ",
                           to_string(in[0].shape()));
  }
  std::string shapes;
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (i > 0) shapes += i + 1 == in.size() ? " and " : ", ";
    shapes += to_string(in[i].shape());
  }
  return "for operands of shapes " + shapes;
}

void check_kind(std::string_view op, Accepts kind, DType d,
                std::span<const Array> in) {
  if (accepts(kind, d)) return;
  const std::string where = operand_shapes(in);
  switch (kind) {
    case Accepts::kFloating:
      throw DTypeError(
          detail::str_cat("[", op, "] requires a floating dtype, got ", name(d),
                          " ", where, "; convert with astype(x, f32)"));
    case Accepts::kNumeric:
      throw DTypeError(detail::str_cat(
          "[", op, "] requires a numeric dtype, got ", name(d), " ", where,
          "; kiln does no arithmetic on bool: use logical_and/logical_or/"
          "logical_not, or convert with astype(x, i32)"));
    case Accepts::kBool:
      throw DTypeError(detail::str_cat("[", op, "] requires a bool dtype, got ",
                                       name(d), " ", where,
                                       "; compare first (e.g. x != 0)"));
    case Accepts::kInteger:
      throw DTypeError(detail::str_cat(
          "[", op, "] requires an integer dtype (i32 or u32), got ", name(d),
          " ", where, "; reinterpret floats with bitcast(x, u32)"));
    case Accepts::kIntegerOrBool:
      throw DTypeError(detail::str_cat(
          "[", op, "] requires an integer or bool dtype (i32, u32 or bool), got ",
          name(d), " ", where, "; reinterpret floats with bitcast(x, u32)"));
    case Accepts::kAny:
      break;
  }
}

void check_same_dtype(std::string_view op, std::span<const Array> in) {
  if (in[0].dtype() == in[1].dtype()) return;
  throw DTypeError(detail::str_cat(
      "[", op, "] dtype mismatch: ", name(in[0].dtype()), " and ",
      name(in[1].dtype()), " (kiln does not promote; use astype) ",
      operand_shapes(in)));
}

Array unary(Prim p, Accepts kind, const Array& a) {
  check_present(name(p), a, 1);
  const std::span<const Array> in(&a, 1);
  check_kind(name(p), kind, a.dtype(), in);
  return detail::bind(p, no_params(), in, Aval{a.dtype(), a.shape()});
}

Array binary(Prim p, Accepts kind, bool gives_bool, const Array& a,
             const Array& b) {
  check_present(name(p), a, 1);
  check_present(name(p), b, 2);
  const std::array<Array, 2> in{a, b};
  check_same_dtype(name(p), in);
  check_kind(name(p), kind, a.dtype(), in);
  Shape shape = a.shape() == b.shape()
                    ? a.shape()
                    : broadcast_shapes(name(p), a.shape(), b.shape());
  return detail::bind(
      p, no_params(), in,
      Aval{gives_bool ? DType::kBool : a.dtype(), std::move(shape)});
}

}  // namespace

// ---- unary ----
Array neg(const Array& a) { return unary(Prim::kNeg, Accepts::kNumeric, a); }
Array abs(const Array& a) { return unary(Prim::kAbs, Accepts::kNumeric, a); }
Array exp(const Array& a) { return unary(Prim::kExp, Accepts::kFloating, a); }
Array log(const Array& a) { return unary(Prim::kLog, Accepts::kFloating, a); }
Array tanh(const Array& a) { return unary(Prim::kTanh, Accepts::kFloating, a); }
// The KILN_MATH rows of dsl/primitives.inc (MathDef<P> in dsl/unary_math.hpp).
#define KILN_PRIM(id, name, family, params, traits)
#define KILN_MATH(id, name, traits) \
  Array name(const Array& a) { return unary(Prim::id, Accepts::kFloating, a); }
#define KILN_MATH2(id, name, traits)                            \
  Array name(const Array& a, const Array& b) {                  \
    return binary(Prim::id, Accepts::kFloating, false, a, b);   \
  }
#include "kiln/dsl/primitives.inc"
#undef KILN_MATH2
#undef KILN_MATH
#undef KILN_PRIM
Array sqrt(const Array& a) { return unary(Prim::kSqrt, Accepts::kFloating, a); }
Array rsqrt(const Array& a) {
  return unary(Prim::kRsqrt, Accepts::kFloating, a);
}
Array sigmoid(const Array& a) {
  return unary(Prim::kSigmoid, Accepts::kFloating, a);
}
Array relu(const Array& a) { return unary(Prim::kRelu, Accepts::kNumeric, a); }
Array logical_not(const Array& a) {
  return unary(Prim::kLogicalNot, Accepts::kBool, a);
}

// ---- binary ----
Array add(const Array& a, const Array& b) {
  return binary(Prim::kAdd, Accepts::kNumeric, false, a, b);
}
Array subtract(const Array& a, const Array& b) {
  return binary(Prim::kSub, Accepts::kNumeric, false, a, b);
}
Array multiply(const Array& a, const Array& b) {
  return binary(Prim::kMul, Accepts::kNumeric, false, a, b);
}
Array divide(const Array& a, const Array& b) {
  return binary(Prim::kDiv, Accepts::kNumeric, false, a, b);
}
Array power(const Array& a, const Array& b) {
  return binary(Prim::kPow, Accepts::kFloating, false, a, b);
}
Array maximum(const Array& a, const Array& b) {
  return binary(Prim::kMaximum, Accepts::kAny, false, a, b);
}
Array minimum(const Array& a, const Array& b) {
  return binary(Prim::kMinimum, Accepts::kAny, false, a, b);
}
Array equal(const Array& a, const Array& b) {
  return binary(Prim::kEq, Accepts::kAny, true, a, b);
}
Array not_equal(const Array& a, const Array& b) {
  return binary(Prim::kNe, Accepts::kAny, true, a, b);
}
Array less(const Array& a, const Array& b) {
  return binary(Prim::kLt, Accepts::kAny, true, a, b);
}
Array less_equal(const Array& a, const Array& b) {
  return binary(Prim::kLe, Accepts::kAny, true, a, b);
}
Array greater(const Array& a, const Array& b) {
  return binary(Prim::kGt, Accepts::kAny, true, a, b);
}
Array greater_equal(const Array& a, const Array& b) {
  return binary(Prim::kGe, Accepts::kAny, true, a, b);
}
Array logical_and(const Array& a, const Array& b) {
  return binary(Prim::kLogicalAnd, Accepts::kBool, true, a, b);
}
Array logical_or(const Array& a, const Array& b) {
  return binary(Prim::kLogicalOr, Accepts::kBool, true, a, b);
}

Array where(const Array& cond, const Array& a, const Array& b) {
  check_present("where", cond, 1);
  check_present("where", a, 2);
  check_present("where", b, 3);
  const std::array<Array, 3> in{cond, a, b};
  if (cond.dtype() != DType::kBool) {
    throw DTypeError(detail::str_cat(
        "[where] the condition must be bool, got ", name(cond.dtype()), " ",
        operand_shapes(in), "; compare first (e.g. x != 0)"));
  }
  if (a.dtype() != b.dtype()) {
    throw DTypeError(detail::str_cat(
        "[where] dtype mismatch: ", name(a.dtype()), " and ", name(b.dtype()),
        " (kiln does not promote; use astype) ", operand_shapes(in)));
  }
  Shape shape;
  try {
    shape = broadcast_shapes(
        "where", broadcast_shapes("where", cond.shape(), a.shape()), b.shape());
  } catch (const ShapeError&) {
    throw ShapeError(detail::str_cat(
        "[where] shapes ", to_string(cond.shape()), ", ", to_string(a.shape()),
        " and ", to_string(b.shape()), " cannot be broadcast together"));
  }
  return detail::bind(Prim::kWhere, no_params(), in,
                      Aval{a.dtype(), std::move(shape)});
}

Array astype(const Array& a, DType dtype) {
  check_present("astype", a, 1);
  // Arrays are immutable, so the conversion to the same dtype is the array
  // itself.
  if (a.dtype() == dtype) return a;
  return detail::bind<Prim::kAstype>(DTypeParams{dtype}, std::span<const Array>(&a, 1),
                      Aval{dtype, a.shape()});
}

// ---- bitwise ----
Array bitwise_and(const Array& a, const Array& b) {
  return binary(Prim::kBitwiseAnd, Accepts::kIntegerOrBool, false, a, b);
}
Array bitwise_or(const Array& a, const Array& b) {
  return binary(Prim::kBitwiseOr, Accepts::kIntegerOrBool, false, a, b);
}
Array bitwise_xor(const Array& a, const Array& b) {
  return binary(Prim::kBitwiseXor, Accepts::kIntegerOrBool, false, a, b);
}
Array bitwise_not(const Array& a) {
  return unary(Prim::kBitwiseNot, Accepts::kIntegerOrBool, a);
}
Array shift_left(const Array& a, const Array& amount) {
  return binary(Prim::kShiftLeft, Accepts::kInteger, false, a, amount);
}
Array shift_right_logical(const Array& a, const Array& amount) {
  return binary(Prim::kShiftRightLogical, Accepts::kInteger, false, a, amount);
}

Array bitcast(const Array& a, DType dtype) {
  check_present("bitcast", a, 1);
  if (a.dtype() == dtype) return a;
  // Only 4-byte dtypes for now: f16/bf16 <-> 2-byte integers would need i16/u16,
  // and f64 <-> pairs of u32 a new trailing axis.
  const auto four_bytes = [](DType d) {
    return d == DType::kF32 || d == DType::kI32 || d == DType::kU32;
  };
  if (!four_bytes(a.dtype()) || !four_bytes(dtype)) {
    throw DTypeError(detail::str_cat(
        "[bitcast] cannot reinterpret ", name(a.dtype()), " as ", name(dtype),
        " for an operand of shape ", to_string(a.shape()),
        "; bitcast converts between f32, i32 and u32 (same element size)"));
  }
  return detail::bind<Prim::kBitcast>(DTypeParams{dtype}, std::span<const Array>(&a, 1),
                      Aval{dtype, a.shape()});
}

// ---- C++ operators ----
Array operator-(const Array& a) { return neg(a); }
Array operator!(const Array& a) { return logical_not(a); }
Array operator+(const Array& a, const Array& b) { return add(a, b); }
Array operator-(const Array& a, const Array& b) { return subtract(a, b); }
Array operator*(const Array& a, const Array& b) { return multiply(a, b); }
Array operator/(const Array& a, const Array& b) { return divide(a, b); }
Array operator==(const Array& a, const Array& b) { return equal(a, b); }
Array operator!=(const Array& a, const Array& b) { return not_equal(a, b); }
Array operator<(const Array& a, const Array& b) { return less(a, b); }
Array operator<=(const Array& a, const Array& b) { return less_equal(a, b); }
Array operator>(const Array& a, const Array& b) { return greater(a, b); }
Array operator>=(const Array& a, const Array& b) { return greater_equal(a, b); }
Array operator&(const Array& a, const Array& b) { return logical_and(a, b); }
Array operator|(const Array& a, const Array& b) { return logical_or(a, b); }

}  // namespace kiln
