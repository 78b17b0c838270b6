// Constructors of GradientTransformations, named and defaulted as in Optax
// (optax.adam, optax.chain, ...), so Optax code translates line by line:
//   auto opt = optim::chain(optim::clip_by_global_norm(1.0),
//   optim::adamw(1e-3));
// A learning rate is a Schedule; a plain number is a constant schedule, kept in
// the optimizer state as a dynamic scalar.
#pragma once

#include <optional>
#include <vector>

#include "kiln/optim/schedule.hpp"
#include "kiln/optim/transform.hpp"

namespace kiln::optim {

// ---- building blocks ----
GradientTransformation identity();
GradientTransformation chain(const std::vector<GradientTransformation>& parts);
template <class... T>
requires(std::is_same_v<T, GradientTransformation>&&...) GradientTransformation
    chain(const T&... parts) {
  return chain(std::vector<GradientTransformation>{parts...});
}
GradientTransformation scale_by_adam(double b1 = 0.9, double b2 = 0.999,
                                     double eps = 1e-8, double eps_root = 0.0);
// g * rsqrt(nu + eps), nu an EMA of g^2 starting at initial_scale.
GradientTransformation scale_by_rms(double decay = 0.9, double eps = 1e-8,
                                    double initial_scale = 0.0);
// Momentum: t = g + decay * t; the update is t (or g + decay * t, nesterov).
GradientTransformation trace(double decay, bool nesterov = false);
// g + weight_decay * param (needs update(grads, state, params)).
GradientTransformation add_decayed_weights(
    double weight_decay, std::optional<Mask> mask = std::nullopt);
// Scales all updates by max_norm / global_norm when the norm exceeds max_norm.
GradientTransformation clip_by_global_norm(double max_norm);
// update * -learning_rate.
GradientTransformation scale_by_learning_rate(Schedule learning_rate);
// `inner` acts only on the leaves the mask matches; other updates pass through
// unchanged (optax.masked). Masks of nested `masked` intersect.
GradientTransformation masked(const GradientTransformation& inner,
                              const Mask& mask);
// The matched leaves get a None update: apply_updates leaves them bit for bit
// unchanged and later stages in a chain skip them.
GradientTransformation frozen(const Mask& mask);

// ---- optimizers ----
GradientTransformation sgd(Schedule learning_rate,
                           std::optional<double> momentum = std::nullopt,
                           bool nesterov = false);
GradientTransformation adam(Schedule learning_rate, double b1 = 0.9,
                            double b2 = 0.999, double eps = 1e-8,
                            double eps_root = 0.0);
// Adam with decoupled weight decay (applied where `mask` matches, default:
// all).
GradientTransformation adamw(Schedule learning_rate, double b1 = 0.9,
                             double b2 = 0.999, double eps = 1e-8,
                             double weight_decay = 1e-4,
                             std::optional<Mask> mask = std::nullopt);
GradientTransformation rmsprop(Schedule learning_rate, double decay = 0.9,
                               double eps = 1e-8, double initial_scale = 0.0,
                               std::optional<double> momentum = std::nullopt,
                               bool nesterov = false);

}  // namespace kiln::optim
