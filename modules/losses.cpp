// Losses, written with DSL ops and checked up front so a shape mistake names
// the loss rather than an op deep inside it.
#include "kiln/modules/losses.hpp"

#include "kiln/dsl/ops.hpp"
#include "kiln/modules/activations.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::nn {
namespace {

void check_floating(const char* op, const Array& a, const char* what) {
  if (a.is_null()) throw ValueError(detail::str_cat("[", op, "] ", what, " is None"));
  if (!is_inexact(a.dtype())) {
    throw DTypeError(detail::str_cat("[", op, "] ", what, " must be floating, got ",
                                     name(a.dtype()), " of shape ", to_string(a.shape())));
  }
}

}  // namespace

Array softmax_cross_entropy_with_integer_labels(const Array& logits, const Array& labels) {
  constexpr const char* kOp = "nn.softmax_cross_entropy_with_integer_labels";
  check_floating(kOp, logits, "logits");
  if (labels.is_null()) throw ValueError(detail::str_cat("[", kOp, "] labels is None"));
  if (labels.dtype() != i32 && labels.dtype() != u32) {
    throw DTypeError(detail::str_cat("[", kOp, "] labels must be i32 or u32, got ",
                                     name(labels.dtype())));
  }
  const Shape& ls = logits.shape();
  if (logits.ndim() < 1 || Shape(ls.begin(), ls.end() - 1) != labels.shape()) {
    throw ShapeError(detail::str_cat("[", kOp, "] expected labels of shape logits.shape[:-1]; got logits ",
                                     to_string(ls), " and labels ", to_string(labels.shape())));
  }
  Array logp = log_softmax(logits);
  return -mean(take_along_axis(logp, expand_dims(labels, -1), -1));
}

Array softmax_cross_entropy(const Array& logits, const Array& targets) {
  constexpr const char* kOp = "nn.softmax_cross_entropy";
  check_floating(kOp, logits, "logits");
  check_floating(kOp, targets, "targets");
  if (logits.shape() != targets.shape() || logits.ndim() < 1) {
    throw ShapeError(detail::str_cat("[", kOp, "] logits ", to_string(logits.shape()),
                                     " and targets ", to_string(targets.shape()),
                                     " must have the same shape (..., K)"));
  }
  return -mean(sum(targets * log_softmax(logits), -1));
}

Array mse(const Array& predictions, const Array& targets) {
  check_floating("nn.mse", predictions, "predictions");
  check_floating("nn.mse", targets, "targets");
  if (predictions.shape() != targets.shape()) {
    throw ShapeError(detail::str_cat("[nn.mse] predictions ", to_string(predictions.shape()),
                                     " and targets ", to_string(targets.shape()),
                                     " must have the same shape"));
  }
  Array d = predictions - targets;
  return mean(d * d);
}

}  // namespace kiln::nn
