// Linear algebra ops: matmul with numpy.matmul semantics. The primitive only
// sees operands of rank >= 2; the 1-D cases are reshapes around it, so backends
// and autodiff have one batched rule to implement.
#include "kiln/dsl/check.hpp"
#include "kiln/dsl/ops.hpp"
#include "kiln/dsl/primitive.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln {

Array matmul(const Array& a, const Array& b) {
  detail::check_not_none("matmul", a, "the first input");
  detail::check_not_none("matmul", b, "the second input");
  if (a.dtype() != b.dtype()) {
    throw DTypeError(detail::str_cat("[matmul] inputs have different dtypes ",
                                     name(a.dtype()), " and ", name(b.dtype()),
                                     "; convert one with astype()"));
  }
  // f16 and bf16 products accumulate in f32 and round once (docs/DTYPES.md); a
  // device without the dtype refuses the arrays before they get here.
  if (!is_inexact(a.dtype())) {
    throw DTypeError(detail::str_cat(
        "[matmul] needs floating inputs (f16, bf16, f32 or f64), got ",
        name(a.dtype()), " inputs of shapes ", to_string(a.shape()), " and ",
        to_string(b.shape())));
  }
  if (a.ndim() == 0 || b.ndim() == 0) {
    throw ShapeError(detail::str_cat(
        "[matmul] inputs must have at least one dimension, got shapes ",
        to_string(a.shape()), " and ", to_string(b.shape()),
        "; use multiply() for scalars"));
  }
  // numpy: a 1-D left operand is a row (1, k), a 1-D right operand a column (k,
  // 1).
  const Array a2 = a.ndim() == 1 ? reshape(a, Shape{1, a.shape()[0]}) : a;
  const Array b2 = b.ndim() == 1 ? reshape(b, Shape{b.shape()[0], 1}) : b;
  const Shape& as = a2.shape();
  const Shape& bs = b2.shape();
  const std::int64_t k = as[as.size() - 1];
  if (k != bs[bs.size() - 2]) {
    throw ShapeError(detail::str_cat(
        "[matmul] last dimension of the first input ", to_string(a.shape()),
        " must match the ", b.ndim() == 1 ? "only" : "second-to-last",
        " dimension of the second input ", to_string(b.shape())));
  }
  Shape out;
  try {
    out = broadcast_shapes("matmul", Shape(as.begin(), as.end() - 2),
                           Shape(bs.begin(), bs.end() - 2));
  } catch (const ShapeError&) {
    throw ShapeError(
        detail::str_cat("[matmul] batch dimensions of the first input ",
                        to_string(a.shape()), " and the second input ",
                        to_string(b.shape()), " cannot be broadcast together"));
  }
  out.push_back(as[as.size() - 2]);
  out.push_back(bs[bs.size() - 1]);
  const Array inputs[] = {a2, b2};
  Array result =
      detail::bind<Prim::kMatmul>({}, inputs, Aval{a.dtype(), out});
  if (a.ndim() > 1 && b.ndim() > 1) return result;
  // Remove the dims that the 1-D promotion added.
  Shape final_shape(out.begin(), out.end() - 2);
  if (a.ndim() > 1) final_shape.push_back(out[out.size() - 2]);
  if (b.ndim() > 1) final_shape.push_back(out[out.size() - 1]);
  return reshape(result, final_shape);
}

}  // namespace kiln
