// Losses, written with DSL ops and checked up front so a shape mistake names
// the loss rather than an op deep inside it.
#include "kiln/modules/losses.hpp"

#include "kiln/dsl/ops.hpp"
#include "kiln/modules/activations.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::nn {
namespace {

// kiln::detail, not kiln::nn::detail (modules/util.hpp), where both are visible.
using kiln::detail::str_cat;

void check_floating(const char* op, const Array& a, const char* what) {
  if (a.is_null()) throw ValueError(str_cat("[", op, "] ", what, " is None"));
  if (!is_inexact(a.dtype())) {
    throw DTypeError(str_cat("[", op, "] ", what, " must be floating, got ",
                             name(a.dtype()), " of shape ", to_string(a.shape())));
  }
}

void check_same_shape(const char* op, const Array& a, const char* a_name, const Array& b,
                      const char* b_name) {
  check_floating(op, a, a_name);
  check_floating(op, b, b_name);
  if (a.shape() != b.shape()) {
    throw ShapeError(str_cat("[", op, "] ", a_name, " ", to_string(a.shape()), " and ",
                             b_name, " ", to_string(b.shape()),
                             " must have the same shape"));
  }
}

// Checks (..., K) floating `a` and `b` of the same shape.
void check_class_pair(const char* op, const Array& a, const char* a_name, const Array& b,
                      const char* b_name) {
  check_floating(op, a, a_name);
  check_floating(op, b, b_name);
  if (a.shape() != b.shape() || a.ndim() < 1) {
    throw ShapeError(str_cat("[", op, "] ", a_name, " ", to_string(a.shape()), " and ",
                             b_name, " ", to_string(b.shape()),
                             " must have the same shape (..., K)"));
  }
}

}  // namespace

Array softmax_cross_entropy_with_integer_labels(const Array& logits, const Array& labels) {
  return mean(softmax_cross_entropy_with_integer_labels_per_example(logits, labels));
}

Array softmax_cross_entropy_with_integer_labels_per_example(const Array& logits,
                                                            const Array& labels) {
  constexpr const char* kOp = "nn.softmax_cross_entropy_with_integer_labels";
  check_floating(kOp, logits, "logits");
  if (labels.is_null()) throw ValueError(str_cat("[", kOp, "] labels is None"));
  if (labels.dtype() != i32 && labels.dtype() != u32) {
    throw DTypeError(str_cat("[", kOp, "] labels must be i32 or u32, got ",
                             name(labels.dtype())));
  }
  const Shape& ls = logits.shape();
  if (logits.ndim() < 1 || Shape(ls.begin(), ls.end() - 1) != labels.shape()) {
    throw ShapeError(str_cat("[", kOp, "] expected labels of shape logits.shape[:-1]; got logits ",
                             to_string(ls), " and labels ", to_string(labels.shape())));
  }
  Array logp = log_softmax(logits);
  return -squeeze(take_along_axis(logp, expand_dims(labels, -1), -1), -1);
}

Array softmax_cross_entropy(const Array& logits, const Array& targets) {
  return mean(softmax_cross_entropy_per_example(logits, targets));
}

Array softmax_cross_entropy_per_example(const Array& logits, const Array& targets) {
  check_class_pair("nn.softmax_cross_entropy", logits, "logits", targets, "targets");
  return -sum(targets * log_softmax(logits), -1);
}

Array mse(const Array& predictions, const Array& targets) {
  check_same_shape("nn.mse", predictions, "predictions", targets, "targets");
  Array d = predictions - targets;
  return mean(d * d);
}

Array sigmoid_binary_cross_entropy_elementwise(const Array& logits, const Array& labels) {
  check_same_shape("nn.sigmoid_binary_cross_entropy", logits, "logits", labels, "labels");
  // softplus(z) = logaddexp(z, 0), whose slope at z = 0 is 1/2 (as JAX).
  return logaddexp(logits, zeros_like(logits)) - labels * logits;
}

Array sigmoid_binary_cross_entropy(const Array& logits, const Array& labels) {
  return mean(sigmoid_binary_cross_entropy_elementwise(logits, labels));
}

Array huber_loss_elementwise(const Array& predictions, const Array& targets, double delta) {
  check_same_shape("nn.huber_loss", predictions, "predictions", targets, "targets");
  if (!(delta > 0.0)) {
    throw ValueError(str_cat("[nn.huber_loss] delta must be > 0, got ", delta));
  }
  const Array err = abs(predictions - targets);
  const Array quadratic = minimum(err, full_like(err, delta));
  return quadratic * quadratic * 0.5 + (err - quadratic) * delta;
}

Array huber_loss(const Array& predictions, const Array& targets, double delta) {
  return mean(huber_loss_elementwise(predictions, targets, delta));
}

Array kl_divergence_per_example(const Array& log_predictions, const Array& targets) {
  check_class_pair("nn.kl_divergence", log_predictions, "log_predictions", targets, "targets");
  const Array zero = targets == 0.0;
  const Array log_targets = log(where(zero, ones_like(targets), targets));
  return sum(targets * (log_targets - log_predictions), -1);
}

Array kl_divergence(const Array& log_predictions, const Array& targets) {
  return mean(kl_divergence_per_example(log_predictions, targets));
}

}  // namespace kiln::nn
