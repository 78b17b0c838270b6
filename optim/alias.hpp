// Constructors of GradientTransformations, named and defaulted as in Optax
// (optax.adam, optax.chain, ...), so Optax code translates line by line:
//   auto opt = optim::chain(optim::clip_by_global_norm(1.0),
//   optim::adamw(1e-3));
// A learning rate is a Schedule; a plain number is a constant schedule, kept in
// the optimizer state as a dynamic scalar.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <type_traits>
#include <string>
#include <utility>
#include <vector>

#include "kiln/optim/schedule.hpp"
#include "kiln/optim/transform.hpp"
#include "kiln/runtime/tree.hpp"

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
// optax.global_norm: sqrt of the sum of squares of every array leaf of a tree
// (gradients, updates), an f32 scalar summed in leaf order, the same value
// clip_by_global_norm compares with max_norm; traces inside grad and jit, so a
// training step can return it to watch clipping.
Array global_norm(std::span<const Array> leaves);
template <class T>
requires(!std::is_convertible_v<const T&, std::span<const Array>>) Array global_norm(const T& tree) {
  const std::vector<Array> leaves = tree::leaves(tree);
  return global_norm(std::span<const Array>(leaves));
}
// update * -learning_rate.
GradientTransformation scale_by_learning_rate(Schedule learning_rate);
// `inner` acts only on the leaves the mask matches; other updates pass through
// unchanged (optax.masked). Masks of nested `masked` intersect.
GradientTransformation masked(const GradientTransformation& inner,
                              const Mask& mask);
// The matched leaves get a None update: apply_updates leaves them bit for bit
// unchanged and later stages in a chain skip them.
GradientTransformation frozen(const Mask& mask);
// sign((1 - b1) * g + b1 * mu), mu an EMA of g with b2 (lion's direction).
GradientTransformation scale_by_lion(double b1 = 0.9, double b2 = 0.99);
// g / sqrt(sum of all g^2 so far + eps), starting the sum at
// initial_accumulator_value (adagrad's scaling).
GradientTransformation scale_by_rss(double initial_accumulator_value = 0.1,
                                    double eps = 1e-7);
// Clips every update element to [-max_delta, max_delta] (optax.clip).
GradientTransformation clip(double max_delta);
// Scales each leaf's update by |param| / |update| (lamb's trust ratio).
GradientTransformation scale_by_trust_ratio(double min_norm = 0.0,
                                            double trust_coefficient = 1.0,
                                            double eps = 0.0);
// Adafactor's factored second-moment scaling (see ScaleByFactoredRms).
GradientTransformation scale_by_factored_rms(
    bool factored = true, double decay_rate = 0.8, std::int64_t step_offset = 0,
    std::int64_t min_dim_size_to_factor = 128, double eps = 1e-30);
// u / max(1, rms(u) / threshold) per leaf.
GradientTransformation clip_by_block_rms(double threshold);
// u * max(rms(param), min_scale) per leaf.
GradientTransformation scale_by_param_block_rms(double min_scale = 1e-3);
// u * step_size.
GradientTransformation scale(double step_size);
// An exponential moving average of the updates, bias-corrected when debias
// (optax.ema). For an EMA of the parameters, see incremental_update.
GradientTransformation ema(double decay, bool debias = true);
// Gradient accumulation (optax.MultiSteps): `inner` steps once every `every_k`
// calls with the mean (use_grad_mean) or the sum of the gradients since its
// last step; the other calls return zero updates and leave its state as it
// was. Which call steps is a dynamic counter in the state, so a jitted train
// step is one program for every call (one jit key).
GradientTransformation multi_steps(const GradientTransformation& inner,
                                   std::int64_t every_k,
                                   bool use_grad_mean = true);
// optax.apply_if_finite: when any gradient holds an inf or NaN, the update is
// zero and `inner`'s state is kept as it was; after more than
// max_consecutive_errors such steps in a row, `inner` steps anyway. The
// choice is made on device (no host read): a jitted step is one program for
// finite and non-finite gradients. The state's "notfinite_count" (i32),
// "last_finite" (bool) and "total_notfinite" (i32) say what happened.
GradientTransformation apply_if_finite(const GradientTransformation& inner,
                                       std::int64_t max_consecutive_errors);
// A different optimizer per labelled subtree (optax.multi_transform).
// path_labels maps path prefixes ("encoder", "head.bias") to labels; a slot
// takes the label of the longest prefix that holds it. Every array slot
// that reaches this stage needs a label that names a transform (ValueError at
// init naming the path otherwise), and every labelled path must exist.
GradientTransformation multi_transform(
    const std::vector<std::pair<std::string, GradientTransformation>>&
        transforms,
    std::vector<std::pair<std::string, std::string>> path_labels);
// The same with a labelling function of (path, leaf).
GradientTransformation multi_transform(
    const std::vector<std::pair<std::string, GradientTransformation>>&
        transforms,
    Mask::LabelFn label_fn);
// Moves the named hyperparameters ("weight_decay", "b1", "b2", "eps",
// "decay", "momentum", "max_delta", "step_size", ...) of every stage that has
// them into the state as dynamic f32 scalars (optax.inject_hyperparams):
// change them with set_hyperparameter, with no retrace. "learning_rate" on a
// schedule keeps the schedule's numbers in the state (set_schedule); a
// constant learning rate is always there. ValueError when a name matches no
// stage (listing the names the stages have).
GradientTransformation inject_hyperparams(const GradientTransformation& inner,
                                          std::vector<std::string> names);

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

// Lion (optax.lion): scale_by_lion, decoupled weight decay, learning rate.
GradientTransformation lion(Schedule learning_rate, double b1 = 0.9,
                            double b2 = 0.99, double weight_decay = 1e-3,
                            std::optional<Mask> mask = std::nullopt);
// Adagrad (optax.adagrad).
GradientTransformation adagrad(Schedule learning_rate,
                               double initial_accumulator_value = 0.1,
                               double eps = 1e-7);
// SGD with L2 weight decay added to the gradient before momentum (PyTorch's
// SGD(weight_decay=...); in Optax chain(add_decayed_weights(wd), sgd(...))).
GradientTransformation sgdw(Schedule learning_rate, double weight_decay,
                            std::optional<double> momentum = std::nullopt,
                            bool nesterov = false,
                            std::optional<Mask> mask = std::nullopt);
// LAMB (optax.lamb): adam, weight decay, trust ratio, learning rate.
GradientTransformation lamb(Schedule learning_rate, double b1 = 0.9,
                            double b2 = 0.999, double eps = 1e-6,
                            double eps_root = 0.0, double weight_decay = 0.0,
                            std::optional<Mask> mask = std::nullopt);
// Adafactor (optax.adafactor; learning_rate is required here). Leaves whose
// two largest dimensions are >= min_dim_size_to_factor keep per-row and
// per-column second moments instead of a full one.
struct AdafactorOptions {
  std::int64_t min_dim_size_to_factor = 128;
  double decay_rate = 0.8;
  std::int64_t decay_offset = 0;
  bool multiply_by_parameter_scale = true;
  std::optional<double> clipping_threshold = 1.0;
  std::optional<double> momentum = std::nullopt;
  std::optional<double> weight_decay_rate = std::nullopt;
  double eps = 1e-30;
  bool factored = true;
  std::optional<Mask> weight_decay_mask = std::nullopt;
};
GradientTransformation adafactor(Schedule learning_rate,
                                 const AdafactorOptions& options = {});

// step_size * new + (1 - step_size) * old at every floating array (the new
// array elsewhere; None stays None), as optax.incremental_update. An EMA of
// the parameters after each step:
//   ema = optim::incremental_update(params, ema, 1 - decay);
template <class T>
T incremental_update(const T& new_tensors, const T& old_tensors,
                     double step_size) {
  return tree::map(
      [&](const Array& n, const Array& o) {
        if (!is_inexact(n.dtype())) return n;
        return n * step_size + o * (1.0 - step_size);
      },
      new_tensors, old_tensors);
}

}  // namespace kiln::optim
