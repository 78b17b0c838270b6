// Losses of kiln::nn (Optax's definitions). Three forms, by suffix:
//   loss(...)              the mean over the batch: a scalar to differentiate;
//   loss_per_example(...)  one value per example: only the class axis (the
//                          last one, which the loss sums over) is reduced;
//   loss_elementwise(...)  no reduction at all (Optax's own output for the
//                          elementwise losses: sigmoid BCE, Huber, squared error).
// The mean forms are the means of the other two.
#pragma once

#include "kiln/runtime/array.hpp"

namespace kiln::nn {

// mean over the batch of -log_softmax(logits)[label]; logits (..., K) floating,
// labels (...) i32/u32 in [0, K) (optax.softmax_cross_entropy_with_integer_labels).
Array softmax_cross_entropy_with_integer_labels(const Array& logits, const Array& labels);
// mean over the batch of -sum(targets * log_softmax(logits), -1); targets has the
// logits' shape and dtype, e.g. one-hot rows (optax.softmax_cross_entropy).
Array softmax_cross_entropy(const Array& logits, const Array& targets);
// mean((predictions - targets)^2) over every element; same shapes.
Array mse(const Array& predictions, const Array& targets);

// Per-example forms of the above: shape logits.shape[:-1].
Array softmax_cross_entropy_with_integer_labels_per_example(const Array& logits,
                                                            const Array& labels);
Array softmax_cross_entropy_per_example(const Array& logits, const Array& targets);

// optax.sigmoid_binary_cross_entropy: -labels log sigmoid(logits) - (1 - labels)
// log sigmoid(-logits), computed as softplus(logits) - labels * logits with a
// stable softplus (finite for any logits, gradient sigmoid(logits) - labels).
// labels are probabilities of the positive class, the logits' shape and dtype.
Array sigmoid_binary_cross_entropy_elementwise(const Array& logits, const Array& labels);
Array sigmoid_binary_cross_entropy(const Array& logits, const Array& labels);

// optax.huber_loss: 0.5 e^2 for |e| <= delta, delta (|e| - 0.5 delta) beyond,
// e = predictions - targets; same shapes.
Array huber_loss_elementwise(const Array& predictions, const Array& targets,
                             double delta = 1.0);
Array huber_loss(const Array& predictions, const Array& targets, double delta = 1.0);

// optax.kl_divergence: sum(targets * (log(targets) - log_predictions), -1), with
// 0 log 0 = 0; log_predictions are log-probabilities (e.g. log_softmax),
// targets probabilities of the same shape (..., K).
Array kl_divergence_per_example(const Array& log_predictions, const Array& targets);
Array kl_divergence(const Array& log_predictions, const Array& targets);

}  // namespace kiln::nn
