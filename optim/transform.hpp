// optim's core: GradientTransformation{init, update} as a *value*: a flat list
// of stages, each a small struct of hyperparameters (a std::variant) plus the
// masks that restrict it to some leaves. Why not closures, like Optax? A jitted
// training step captures the optimizer (`filter_jit([opt](...){...})`), so the
// optimizer is a static value of the jit key and needs a stable hash and a
// value ==. std::function and capturing lambdas have neither (kiln rejects them
// as static leaves, runtime/static.hpp); a description of the chain has both,
// prints readably in a retrace explanation, and `chain` is just concatenation.
// Every numeric setting is part of == (init and update read them), except that
// learning rates and schedule counts live in the State as dynamic scalars:
// change them there (set_learning_rate) and no jit retraces.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/hash/hash.h"
#include "kiln/dsl/autodiff.hpp"
#include "kiln/dsl/ops.hpp"
#include "kiln/optim/schedule.hpp"
#include "kiln/optim/state.hpp"
#include "kiln/runtime/tree.hpp"

namespace kiln::optim {

// Which leaves a stage acts on, decided per array slot from the slot's path
// (as tree::paths prints it: "layers[0].weight") and its gradient (so a filter
// sees the dtype and shape of the parameter). A function pointer, not a
// closure, for the reasons above.
struct Mask {
  using Filter = bool (*)(const Array& leaf);
  using PathFilter = bool (*)(std::string_view path, const Array& leaf);
  // multi_transform's labeller: the label of a slot ("" for none).
  using LabelFn = std::string_view (*)(std::string_view path,
                                       const Array& leaf);

  Filter filter = nullptr;
  PathFilter path_filter = nullptr;
  // A slot matches a listed path when it is that path or lies under it
  // ("layers[0]" matches "layers[0].weight"). Every listed path must match
  // some slot (ValueError at init otherwise: a typo would silently mask
  // nothing).
  std::vector<std::string> paths;
  bool invert = false;  // act where the mask does *not* match
  // multi_transform: the slot's label (label_fn's, else that of the longest
  // path prefix in path_labels that holds the slot) must equal `label`.
  std::string label;
  LabelFn label_fn = nullptr;
  std::vector<std::pair<std::string, std::string>> path_labels;

  static Mask by_filter(Filter f) {
    Mask m;
    m.filter = f;
    return m;
  }
  static Mask by_path_filter(PathFilter f) {
    Mask m;
    m.path_filter = f;
    return m;
  }
  static Mask by_paths(std::vector<std::string> p) {
    Mask m;
    m.paths = std::move(p);
    return m;
  }
  Mask operator!() const {
    Mask m = *this;
    m.invert = !m.invert;
    return m;
  }
  bool matches(std::string_view path, const Array& leaf) const;
  // The multi_transform label of a slot under label_fn / path_labels ("" when
  // it has none).
  std::string label_of(std::string_view path, const Array& leaf) const;

  friend bool operator==(const Mask&, const Mask&) = default;
  template <class H>
  friend H AbslHashValue(H h, const Mask& m) {
    return H::combine(
        std::move(h), reinterpret_cast<std::uintptr_t>(m.filter),
        reinterpret_cast<std::uintptr_t>(m.path_filter), m.paths, m.invert,
        m.label, reinterpret_cast<std::uintptr_t>(m.label_fn), m.path_labels);
  }
};

// ---- the stages (each mirrors the Optax transformation of the same name) ----
#define KILN_OPTIM_STAGE_(Type, name, ...)                    \
  static constexpr std::string_view kName = name;             \
  friend bool operator==(const Type&, const Type&) = default; \
  template <class H>                                          \
  friend H AbslHashValue(H h, const Type& s) {                \
    return H::combine(std::move(h), __VA_ARGS__);             \
  }

struct ScaleByAdam {
  double b1 = 0.9, b2 = 0.999, eps = 1e-8, eps_root = 0.0;
  KILN_OPTIM_STAGE_(ScaleByAdam, "scale_by_adam", s.b1, s.b2, s.eps, s.eps_root)
};
struct ScaleByRms {
  double decay = 0.9, eps = 1e-8, initial_scale = 0.0;
  KILN_OPTIM_STAGE_(ScaleByRms, "scale_by_rms", s.decay, s.eps, s.initial_scale)
};
struct Momentum {
  double decay = 0.9;
  bool nesterov = false;
  KILN_OPTIM_STAGE_(Momentum, "trace", s.decay, s.nesterov)
};
struct AddDecayedWeights {
  double weight_decay = 0.0;
  KILN_OPTIM_STAGE_(AddDecayedWeights, "add_decayed_weights", s.weight_decay)
};
struct ClipByGlobalNorm {
  double max_norm = 1.0;
  KILN_OPTIM_STAGE_(ClipByGlobalNorm, "clip_by_global_norm", s.max_norm)
};
// Multiplies by -learning_rate (by +learning_rate when !flip_sign, as
// adafactor): a constant is kept in the state as a dynamic f32
// "learning_rate"; a schedule is evaluated at the state's i32 "count".
struct ScaleByLearningRate {
  Schedule learning_rate;
  bool flip_sign = true;
  KILN_OPTIM_STAGE_(ScaleByLearningRate, "scale_by_learning_rate",
                    s.learning_rate, s.flip_sign)
};
// sign((1 - b1) * g + b1 * mu); mu <- EMA of g with b2 (optax.scale_by_lion).
struct ScaleByLion {
  double b1 = 0.9, b2 = 0.99;
  KILN_OPTIM_STAGE_(ScaleByLion, "scale_by_lion", s.b1, s.b2)
};
// g * rsqrt(sum of g^2 so far + eps), 0 where the sum is 0 (adagrad).
struct ScaleByRss {
  double initial_accumulator_value = 0.1, eps = 1e-7;
  KILN_OPTIM_STAGE_(ScaleByRss, "scale_by_rss", s.initial_accumulator_value,
                    s.eps)
};
// Elementwise clip to [-max_delta, max_delta] (optax.clip).
struct Clip {
  double max_delta = 1.0;
  KILN_OPTIM_STAGE_(Clip, "clip", s.max_delta)
};
// update * trust_coefficient * |param| / (|update| + eps) per leaf, 1 where
// either norm is 0 (lamb; optax.scale_by_trust_ratio). Needs the params.
struct ScaleByTrustRatio {
  double min_norm = 0.0, trust_coefficient = 1.0, eps = 0.0;
  KILN_OPTIM_STAGE_(ScaleByTrustRatio, "scale_by_trust_ratio", s.min_norm,
                    s.trust_coefficient, s.eps)
};
// Adafactor's second moments: per-row and per-column EMAs of g^2 for leaves
// whose two largest dimensions are >= min_dim_size_to_factor, a full EMA
// otherwise (optax.scale_by_factored_rms). Needs the params.
struct ScaleByFactoredRms {
  bool factored = true;
  double decay_rate = 0.8;
  std::int64_t step_offset = 0;
  std::int64_t min_dim_size_to_factor = 128;
  double eps = 1e-30;
  KILN_OPTIM_STAGE_(ScaleByFactoredRms, "scale_by_factored_rms", s.factored,
                    s.decay_rate, s.step_offset, s.min_dim_size_to_factor,
                    s.eps)
};
// u / max(1, rms(u) / threshold) per leaf (optax.clip_by_block_rms).
struct ClipByBlockRms {
  double threshold = 1.0;
  KILN_OPTIM_STAGE_(ClipByBlockRms, "clip_by_block_rms", s.threshold)
};
// u * max(rms(param), min_scale) (optax.scale_by_param_block_rms).
struct ScaleByParamBlockRms {
  double min_scale = 1e-3;
  KILN_OPTIM_STAGE_(ScaleByParamBlockRms, "scale_by_param_block_rms",
                    s.min_scale)
};
// u * step_size (optax.scale).
struct Scale {
  double step_size = 1.0;
  KILN_OPTIM_STAGE_(Scale, "scale", s.step_size)
};
// An EMA of the updates, bias-corrected when debias (optax.ema).
struct Ema {
  double decay = 0.9;
  bool debias = true;
  KILN_OPTIM_STAGE_(Ema, "ema", s.decay, s.debias)
};
// Gradient accumulation (optax.MultiSteps): the next `inner_stages` stages
// see the mean (or sum) of the gradients since their last step and advance
// their state only every `every_k`-th call; the other calls give zero
// updates. One program for every call: which call emits is a dynamic
// "mini_step" in the state.
struct MultiSteps {
  std::int64_t every_k = 1;
  bool use_grad_mean = true;
  std::int64_t inner_stages = 0;
  KILN_OPTIM_STAGE_(MultiSteps, "multi_steps", s.every_k, s.use_grad_mean,
                    s.inner_stages)
};
// optax.apply_if_finite: the next `inner_stages` stages run only when every
// gradient they see is finite, or when more than max_consecutive_errors steps
// in a row were not; otherwise the update is zero and their state stays as
// it was. Selected with `where` on dynamic scalars ("notfinite_count",
// "last_finite", "total_notfinite"), so one program serves every step.
struct ApplyIfFinite {
  std::int64_t max_consecutive_errors = 0;
  std::int64_t inner_stages = 0;
  KILN_OPTIM_STAGE_(ApplyIfFinite, "apply_if_finite", s.max_consecutive_errors,
                    s.inner_stages)
};
// multi_transform's check: every array slot that reaches it has exactly one
// of `labels`. Acts on nothing.
struct LabelCheck {
  std::vector<std::string> labels;
  KILN_OPTIM_STAGE_(LabelCheck, "multi_transform", s.labels)
};
#undef KILN_OPTIM_STAGE_
// Replaces the update by None (apply_updates leaves the parameter untouched,
// bit for bit, and later stages skip it).
struct Freeze {
  static constexpr std::string_view kName = "freeze";
  friend bool operator==(const Freeze&, const Freeze&) = default;
  template <class H>
  friend H AbslHashValue(H h, const Freeze&) {
    return h;
  }
};

using StageOp =
    std::variant<ScaleByAdam, ScaleByRms, Momentum, AddDecayedWeights,
                 ClipByGlobalNorm, ScaleByLearningRate, Freeze, ScaleByLion,
                 ScaleByRss, Clip, ScaleByTrustRatio, ScaleByFactoredRms,
                 ClipByBlockRms, ScaleByParamBlockRms, Scale, Ema, MultiSteps,
                 ApplyIfFinite, LabelCheck>;

struct Stage {
  StageOp op;
  std::vector<Mask> masks;  // all must match (nested `masked` intersect)
  // Hyperparameters read from the state's scalars rather than from `op`
  // (inject_hyperparams), sorted: new values there need no new program.
  std::vector<std::string> dynamic;

  std::string_view name() const;
  // Defaulted in transform.cpp: inline, every program including kiln.hpp would
  // instantiate the comparison of all the stage types.
  friend bool operator==(const Stage&, const Stage&);
  template <class H>
  friend H AbslHashValue(H h, const Stage& s) {
    h = H::combine(std::move(h), s.op.index(), s.masks, s.dynamic);
    return std::visit(
        [&](const auto& op) { return H::combine(std::move(h), op); }, s.op);
  }
};

class GradientTransformation;

namespace detail {
State init_flat(const GradientTransformation& opt, const TreeDef& def,
                std::span<const Array> slots);
// Checks grads (and params, when given) against the state; returns the update
// slots (one per gradient slot) and the new state.
std::pair<std::vector<Array>, State> update_flat(
    const GradientTransformation& opt, const TreeDef& grads_def,
    std::vector<Array> grad_slots, const State& state,
    const TreeDef* params_def, std::span<const Array> param_slots);
std::vector<Array> apply_updates_flat(const TreeDef& params_def,
                                      std::span<const Array> param_slots,
                                      const TreeDef& updates_def,
                                      std::span<const Array> update_slots);
}  // namespace detail

class GradientTransformation {
 public:
  // Owns its stages by value, and == and the hash cover them: a static value.
  KILN_STATIC_VALUE(GradientTransformation);
  GradientTransformation();  // the identity
  explicit GradientTransformation(std::vector<Stage> stages);
  // Special members out of line (transform.cpp): a program that names an
  // optimizer does not instantiate the stage vector's destructor and copies.
  GradientTransformation(const GradientTransformation&);
  GradientTransformation(GradientTransformation&&) noexcept;
  GradientTransformation& operator=(const GradientTransformation&);
  GradientTransformation& operator=(GradientTransformation&&) noexcept;
  ~GradientTransformation();

  // State for gradients shaped like `gradient_template` (use
  // optim::gradient_template(model); a tree shaped like the params instead is
  // what seed 2 is about, and update will say where it differs).
  template <class T>
  State init(const T& gradient_template) const {
    tree::Flat f = tree::flatten(gradient_template);
    return detail::init_flat(*this, f.def,
                             kiln::detail::expand_slots(f.def, f.leaves));
  }

  // (updates, new state). `grads` must have exactly the structure the state
  // was initialised with (TreeError listing every differing path otherwise).
  // `params` is needed by add_decayed_weights (adamw).
  template <class T>
  std::pair<T, State> update(const T& grads, const State& state,
                             const T& params) const {
    tree::Flat g = tree::flatten(grads);
    tree::Flat p = tree::flatten(params);
    auto [slots, next] = detail::update_flat(
        *this, g.def, kiln::detail::expand_slots(g.def, g.leaves), state,
        &p.def, kiln::detail::expand_slots(p.def, p.leaves));
    return {kiln::detail::unflatten_slots<T>(g.def, slots), std::move(next)};
  }
  template <class T>
  std::pair<T, State> update(const T& grads, const State& state) const {
    tree::Flat g = tree::flatten(grads);
    auto [slots, next] = detail::update_flat(
        *this, g.def, kiln::detail::expand_slots(g.def, g.leaves), state,
        nullptr, {});
    return {kiln::detail::unflatten_slots<T>(g.def, slots), std::move(next)};
  }

  const std::vector<Stage>& stages() const { return stages_; }

  friend bool operator==(const GradientTransformation&,
                         const GradientTransformation&);  // transform.cpp
  template <class H>
  friend H AbslHashValue(H h, const GradientTransformation& t) {
    return H::combine(std::move(h), t.stages_);
  }

 private:
  std::vector<Stage> stages_;
};

// "chain(scale_by_adam(b1=0.9, ...), scale_by_learning_rate(0.001))".
std::ostream& operator<<(std::ostream& os, const Stage& s);
std::ostream& operator<<(std::ostream& os, const GradientTransformation& t);

// What grad returns for `model`: zeros at the leaves grad differentiates,
// None at every other slot (integer and bool arrays, None, arrays inside
// Frozen), statics copied. The same rule as grad
// (detail::differentiable_leaves).
template <class T>
T gradient_template(const T& model) {
  tree::Flat flat = tree::flatten(model);
  const std::vector<bool> diff =
      kiln::detail::differentiable_leaves(flat.def, flat.leaves);
  std::size_t next = 0;
  return tree::map(
      [&](const Array& a) { return diff[next++] ? zeros_like(a) : Array(); },
      model);
}

// params + updates at every slot where updates holds an array (in the
// parameter's dtype); the parameter itself, untouched, where updates is None.
// The structures must agree except where updates has None.
template <class T>
T apply_updates(const T& params, const T& updates) {
  tree::Flat p = tree::flatten(params);
  tree::Flat u = tree::flatten(updates);
  return kiln::detail::unflatten_slots<T>(
      p.def, detail::apply_updates_flat(
                 p.def, kiln::detail::expand_slots(p.def, p.leaves), u.def,
                 kiln::detail::expand_slots(u.def, u.leaves)));
}

// The state with every constant learning rate replaced (no retrace: it is a
// dynamic scalar). ValueError when the optimizer has none (only schedules).
State set_learning_rate(const State& state, double learning_rate);
// The state with the run-time hyperparameter `name` ("weight_decay", "b1",
// ...; made dynamic by inject_hyperparams) set in every stage that has it.
// No retrace. ValueError naming the ones there are when no stage has it.
State set_hyperparameter(const State& state, std::string_view name,
                         double value);
// The state with the numbers of its run-time schedule (made by
// inject_hyperparams(opt, {"learning_rate"}) on a scheduled optimizer)
// replaced by those of `schedule`, which must have the same shape (say,
// another warmup_cosine_decay_schedule: other peak, warmup and decay steps).
// No retrace. ValueError naming both sets of numbers otherwise.
State set_schedule(const State& state, const Schedule& schedule);
// The value of the run-time hyperparameter `name` in the first stage that
// has it (ValueError if none).
Array hyperparameter(const State& state, std::string_view name);
// The constant learning rate of the first stage that has one (ValueError if
// none).
Array learning_rate(const State& state);

}  // namespace kiln::optim
