// Losses of kiln::nn (Optax's definitions, averaged over the batch to a scalar
// so they can be differentiated directly).
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

}  // namespace kiln::nn
