// The value side of GradientTransformation: constructors (alias.hpp), masks
// and printing. The numerics are in update.cpp.
#include <algorithm>
#include <ostream>

#include "kiln/optim/alias.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::optim {
namespace {

GradientTransformation one(StageOp op) {
  return GradientTransformation({Stage{std::move(op), {}, {}}});
}

bool under(std::string_view path, std::string_view prefix) {
  if (prefix.empty()) return true;  // the root holds everything
  if (path.size() < prefix.size() || path.substr(0, prefix.size()) != prefix)
    return false;
  return path.size() == prefix.size() || path[prefix.size()] == '.' ||
         path[prefix.size()] == '[';
}

}  // namespace

bool Mask::matches(std::string_view path, const Array& leaf) const {
  bool m = true;
  if (filter != nullptr) m = m && filter(leaf);
  if (path_filter != nullptr) m = m && path_filter(path, leaf);
  if (!paths.empty()) {
    bool any = false;
    for (const std::string& p : paths) any = any || under(path, p);
    m = m && any;
  }
  if (!label.empty()) m = m && label_of(path, leaf) == label;
  return m != invert;
}

std::string Mask::label_of(std::string_view path, const Array& leaf) const {
  if (label_fn != nullptr) return std::string(label_fn(path, leaf));
  const std::pair<std::string, std::string>* best = nullptr;
  for (const auto& entry : path_labels) {
    if (under(path, entry.first) &&
        (best == nullptr || entry.first.size() > best->first.size()))
      best = &entry;
  }
  return best == nullptr ? std::string() : best->second;
}

std::string_view Stage::name() const {
  return std::visit(
      [](const auto& op) { return std::decay_t<decltype(op)>::kName; }, op);
}

std::ostream& operator<<(std::ostream& os, const Stage& s) {
  struct Print {
    std::ostream& os;
    void operator()(const ScaleByAdam& a) {
      os << "scale_by_adam(b1=" << a.b1 << ", b2=" << a.b2 << ", eps=" << a.eps
         << ", eps_root=" << a.eps_root << ")";
    }
    void operator()(const ScaleByRms& a) {
      os << "scale_by_rms(decay=" << a.decay << ", eps=" << a.eps
         << ", initial_scale=" << a.initial_scale << ")";
    }
    void operator()(const Momentum& a) {
      os << "trace(decay=" << a.decay << (a.nesterov ? ", nesterov" : "")
         << ")";
    }
    void operator()(const AddDecayedWeights& a) {
      os << "add_decayed_weights(" << a.weight_decay << ")";
    }
    void operator()(const ClipByGlobalNorm& a) {
      os << "clip_by_global_norm(" << a.max_norm << ")";
    }
    void operator()(const ScaleByLearningRate& a) {
      os << "scale_by_learning_rate(" << a.learning_rate
         << (a.flip_sign ? "" : ", flip_sign=false") << ")";
    }
    void operator()(const Freeze&) { os << "freeze()"; }
    void operator()(const ScaleByLion& a) {
      os << "scale_by_lion(b1=" << a.b1 << ", b2=" << a.b2 << ")";
    }
    void operator()(const ScaleByRss& a) {
      os << "scale_by_rss(initial_accumulator_value="
         << a.initial_accumulator_value << ", eps=" << a.eps << ")";
    }
    void operator()(const Clip& a) { os << "clip(" << a.max_delta << ")"; }
    void operator()(const ScaleByTrustRatio& a) {
      os << "scale_by_trust_ratio(min_norm=" << a.min_norm
         << ", trust_coefficient=" << a.trust_coefficient << ", eps=" << a.eps
         << ")";
    }
    void operator()(const ScaleByFactoredRms& a) {
      os << "scale_by_factored_rms(factored=" << a.factored
         << ", decay_rate=" << a.decay_rate << ", step_offset=" << a.step_offset
         << ", min_dim_size_to_factor=" << a.min_dim_size_to_factor
         << ", eps=" << a.eps << ")";
    }
    void operator()(const ClipByBlockRms& a) {
      os << "clip_by_block_rms(" << a.threshold << ")";
    }
    void operator()(const ScaleByParamBlockRms& a) {
      os << "scale_by_param_block_rms(" << a.min_scale << ")";
    }
    void operator()(const Scale& a) { os << "scale(" << a.step_size << ")"; }
    void operator()(const Ema& a) {
      os << "ema(decay=" << a.decay << (a.debias ? "" : ", no debias") << ")";
    }
    void operator()(const MultiSteps& a) {
      os << "multi_steps(every_k=" << a.every_k
         << (a.use_grad_mean ? ", mean" : ", sum") << ", over the next "
         << a.inner_stages << " stages)";
    }
    void operator()(const ApplyIfFinite& a) {
      os << "apply_if_finite(max_consecutive_errors="
         << a.max_consecutive_errors << ", over the next " << a.inner_stages
         << " stages)";
    }
    void operator()(const LabelCheck& a) {
      os << "multi_transform(" << kiln::detail::join(a.labels, ", ") << ")";
    }
  };
  std::visit(Print{os}, s.op);
  if (!s.dynamic.empty())
    os << " with dynamic " << kiln::detail::join(s.dynamic, ", ");
  for (const Mask& m : s.masks) {
    if (m.filter == nullptr && m.path_filter == nullptr && m.paths.empty() &&
        m.label.empty() && !m.invert)
      continue;  // multi_transform's label check acts everywhere
    os << " where " << (m.invert ? "not " : "") << "(";
    const char* sep = "";
    if (m.filter != nullptr) {
      os << kiln::detail::function_name(
          reinterpret_cast<std::uintptr_t>(m.filter));
      sep = " and ";
    }
    if (m.path_filter != nullptr) {
      os << sep
         << kiln::detail::function_name(
                reinterpret_cast<std::uintptr_t>(m.path_filter));
      sep = " and ";
    }
    if (!m.paths.empty()) {
      os << sep << "under " << kiln::detail::join(m.paths, " or ");
      sep = " and ";
    }
    if (!m.label.empty()) os << sep << "label " << m.label;
    os << ")";
  }
  return os;
}

std::ostream& operator<<(std::ostream& os, const GradientTransformation& t) {
  if (t.stages().size() == 1) return os << t.stages()[0];
  return os << "chain(" << kiln::detail::join(t.stages(), ", ") << ")";
}

bool operator==(const Stage&, const Stage&) = default;
GradientTransformation::GradientTransformation() = default;
GradientTransformation::GradientTransformation(std::vector<Stage> stages)
    : stages_(std::move(stages)) {}
GradientTransformation::GradientTransformation(const GradientTransformation&) = default;
GradientTransformation::GradientTransformation(GradientTransformation&&) noexcept = default;
GradientTransformation& GradientTransformation::operator=(const GradientTransformation&) =
    default;
GradientTransformation& GradientTransformation::operator=(GradientTransformation&&) noexcept =
    default;
GradientTransformation::~GradientTransformation() = default;
bool operator==(const GradientTransformation&, const GradientTransformation&) = default;

GradientTransformation identity() { return GradientTransformation(); }

GradientTransformation chain(const std::vector<GradientTransformation>& parts) {
  std::vector<Stage> stages;
  for (const GradientTransformation& p : parts) {
    stages.insert(stages.end(), p.stages().begin(), p.stages().end());
  }
  return GradientTransformation(std::move(stages));
}

GradientTransformation scale_by_adam(double b1, double b2, double eps,
                                     double eps_root) {
  return one(ScaleByAdam{b1, b2, eps, eps_root});
}
GradientTransformation scale_by_rms(double decay, double eps,
                                    double initial_scale) {
  return one(ScaleByRms{decay, eps, initial_scale});
}
GradientTransformation trace(double decay, bool nesterov) {
  return one(Momentum{decay, nesterov});
}
GradientTransformation add_decayed_weights(double weight_decay,
                                           std::optional<Mask> mask) {
  GradientTransformation t = one(AddDecayedWeights{weight_decay});
  return mask ? masked(t, *mask) : t;
}
Array global_norm(std::span<const Array> leaves) {
  Array sq;
  for (const Array& g : leaves) {
    if (g.is_null()) continue;
    const Array s = astype(sum(g * g), f32);
    sq = sq.is_null() ? s : sq + s;
  }
  return sq.is_null() ? zeros({}, f32) : sqrt(sq);
}

GradientTransformation clip_by_global_norm(double max_norm) {
  if (!(max_norm > 0)) {
    throw ValueError(kiln::detail::str_cat(
        "[optim.clip_by_global_norm] max_norm must be positive, got ",
        max_norm));
  }
  return one(ClipByGlobalNorm{max_norm});
}
GradientTransformation scale_by_learning_rate(Schedule learning_rate) {
  return one(ScaleByLearningRate{std::move(learning_rate)});
}
GradientTransformation masked(const GradientTransformation& inner,
                              const Mask& mask) {
  std::vector<Stage> stages = inner.stages();
  for (Stage& s : stages) s.masks.push_back(mask);
  return GradientTransformation(std::move(stages));
}
GradientTransformation frozen(const Mask& mask) {
  return masked(one(Freeze{}), mask);
}

GradientTransformation scale_by_lion(double b1, double b2) {
  return one(ScaleByLion{b1, b2});
}
GradientTransformation scale_by_rss(double initial_accumulator_value,
                                    double eps) {
  if (initial_accumulator_value < 0) {
    throw ValueError(kiln::detail::str_cat(
        "[optim.scale_by_rss] initial_accumulator_value must be >= 0, got ",
        initial_accumulator_value));
  }
  return one(ScaleByRss{initial_accumulator_value, eps});
}
GradientTransformation clip(double max_delta) {
  if (!(max_delta >= 0)) {
    throw ValueError(kiln::detail::str_cat(
        "[optim.clip] max_delta must be >= 0, got ", max_delta));
  }
  return one(Clip{max_delta});
}
GradientTransformation scale_by_trust_ratio(double min_norm,
                                            double trust_coefficient,
                                            double eps) {
  return one(ScaleByTrustRatio{min_norm, trust_coefficient, eps});
}
GradientTransformation scale_by_factored_rms(
    bool factored, double decay_rate, std::int64_t step_offset,
    std::int64_t min_dim_size_to_factor, double eps) {
  return one(ScaleByFactoredRms{factored, decay_rate, step_offset,
                                min_dim_size_to_factor, eps});
}
GradientTransformation clip_by_block_rms(double threshold) {
  if (!(threshold > 0)) {
    throw ValueError(kiln::detail::str_cat(
        "[optim.clip_by_block_rms] threshold must be positive, got ",
        threshold));
  }
  return one(ClipByBlockRms{threshold});
}
GradientTransformation scale_by_param_block_rms(double min_scale) {
  return one(ScaleByParamBlockRms{min_scale});
}
GradientTransformation scale(double step_size) { return one(Scale{step_size}); }
GradientTransformation ema(double decay, bool debias) {
  return one(Ema{decay, debias});
}
namespace {
// A stage that governs the `inner` stages after it (multi_steps,
// apply_if_finite): `head` counts them.
GradientTransformation wrapping(StageOp head,
                                const GradientTransformation& inner) {
  std::vector<Stage> stages = {Stage{std::move(head), {}, {}}};
  stages.insert(stages.end(), inner.stages().begin(), inner.stages().end());
  return GradientTransformation(std::move(stages));
}
std::int64_t count_of(const GradientTransformation& inner) {
  return static_cast<std::int64_t>(inner.stages().size());
}
}  // namespace

GradientTransformation multi_steps(const GradientTransformation& inner,
                                   std::int64_t every_k, bool use_grad_mean) {
  if (every_k < 1) {
    throw ValueError(kiln::detail::str_cat(
        "[optim.multi_steps] every_k must be >= 1, got ", every_k));
  }
  return wrapping(MultiSteps{every_k, use_grad_mean, count_of(inner)}, inner);
}
GradientTransformation apply_if_finite(const GradientTransformation& inner,
                                       std::int64_t max_consecutive_errors) {
  if (max_consecutive_errors < 0) {
    throw ValueError(kiln::detail::str_cat(
        "[optim.apply_if_finite] max_consecutive_errors must be >= 0, got ",
        max_consecutive_errors));
  }
  return wrapping(ApplyIfFinite{max_consecutive_errors, count_of(inner)},
                  inner);
}

namespace {
// multi_transform as data: a LabelCheck stage, then each transform masked to
// its label. The masks partition the slots, so the chain of masked
// transforms is the same as running each on its own subtree.
GradientTransformation labelled(
    const std::vector<std::pair<std::string, GradientTransformation>>&
        transforms,
    const Mask& base) {
  std::vector<std::string> labels;
  for (const auto& [label, t] : transforms) {
    if (label.empty() ||
        std::find(labels.begin(), labels.end(), label) != labels.end()) {
      throw ValueError(kiln::detail::str_cat(
          "[optim.multi_transform] labels must be non-empty and distinct, "
          "got '",
          label, "' twice or empty"));
    }
    labels.push_back(label);
  }
  std::vector<Stage> stages = {Stage{LabelCheck{labels}, {base}, {}}};
  for (const auto& [label, t] : transforms) {
    Mask m = base;
    m.label = label;
    GradientTransformation part = masked(t, m);
    stages.insert(stages.end(), part.stages().begin(), part.stages().end());
  }
  return GradientTransformation(std::move(stages));
}
}  // namespace

GradientTransformation multi_transform(
    const std::vector<std::pair<std::string, GradientTransformation>>&
        transforms,
    std::vector<std::pair<std::string, std::string>> path_labels) {
  for (const auto& [path, label] : path_labels) {
    if (std::none_of(transforms.begin(), transforms.end(),
                     [&](const auto& t) { return t.first == label; })) {
      throw ValueError(kiln::detail::str_cat("[optim.multi_transform] path '",
                                             path, "' has label '", label,
                                             "', which names no transform"));
    }
  }
  Mask base;
  base.path_labels = std::move(path_labels);
  return labelled(transforms, base);
}

GradientTransformation multi_transform(
    const std::vector<std::pair<std::string, GradientTransformation>>&
        transforms,
    Mask::LabelFn label_fn) {
  Mask base;
  base.label_fn = label_fn;
  return labelled(transforms, base);
}

GradientTransformation sgd(Schedule learning_rate,
                           std::optional<double> momentum, bool nesterov) {
  if (!momentum) return scale_by_learning_rate(std::move(learning_rate));
  return chain(trace(*momentum, nesterov),
               scale_by_learning_rate(std::move(learning_rate)));
}
GradientTransformation adam(Schedule learning_rate, double b1, double b2,
                            double eps, double eps_root) {
  return chain(scale_by_adam(b1, b2, eps, eps_root),
               scale_by_learning_rate(std::move(learning_rate)));
}
GradientTransformation adamw(Schedule learning_rate, double b1, double b2,
                             double eps, double weight_decay,
                             std::optional<Mask> mask) {
  return chain(scale_by_adam(b1, b2, eps),
               add_decayed_weights(weight_decay, std::move(mask)),
               scale_by_learning_rate(std::move(learning_rate)));
}
GradientTransformation rmsprop(Schedule learning_rate, double decay, double eps,
                               double initial_scale,
                               std::optional<double> momentum, bool nesterov) {
  GradientTransformation t =
      chain(scale_by_rms(decay, eps, initial_scale),
            scale_by_learning_rate(std::move(learning_rate)));
  return momentum ? chain(t, trace(*momentum, nesterov)) : t;
}
GradientTransformation lion(Schedule learning_rate, double b1, double b2,
                            double weight_decay, std::optional<Mask> mask) {
  return chain(scale_by_lion(b1, b2),
               add_decayed_weights(weight_decay, std::move(mask)),
               scale_by_learning_rate(std::move(learning_rate)));
}
GradientTransformation adagrad(Schedule learning_rate,
                               double initial_accumulator_value, double eps) {
  return chain(scale_by_rss(initial_accumulator_value, eps),
               scale_by_learning_rate(std::move(learning_rate)));
}
GradientTransformation sgdw(Schedule learning_rate, double weight_decay,
                            std::optional<double> momentum, bool nesterov,
                            std::optional<Mask> mask) {
  return chain(add_decayed_weights(weight_decay, std::move(mask)),
               sgd(std::move(learning_rate), momentum, nesterov));
}
GradientTransformation lamb(Schedule learning_rate, double b1, double b2,
                            double eps, double eps_root, double weight_decay,
                            std::optional<Mask> mask) {
  return chain(scale_by_adam(b1, b2, eps, eps_root),
               add_decayed_weights(weight_decay, std::move(mask)),
               scale_by_trust_ratio(),
               scale_by_learning_rate(std::move(learning_rate)));
}
GradientTransformation adafactor(Schedule learning_rate,
                                 const AdafactorOptions& o) {
  std::vector<GradientTransformation> parts = {
      scale_by_factored_rms(o.factored, o.decay_rate, o.decay_offset,
                            o.min_dim_size_to_factor, o.eps)};
  if (o.clipping_threshold) {
    parts.push_back(clip_by_block_rms(*o.clipping_threshold));
  }
  parts.push_back(
      one(ScaleByLearningRate{std::move(learning_rate), /*flip_sign=*/false}));
  if (o.multiply_by_parameter_scale)
    parts.push_back(scale_by_param_block_rms());
  if (o.momentum) parts.push_back(ema(*o.momentum, /*debias=*/false));
  if (o.weight_decay_rate) {
    parts.push_back(
        add_decayed_weights(*o.weight_decay_rate, o.weight_decay_mask));
  }
  parts.push_back(scale(-1.0));
  return chain(parts);
}

}  // namespace kiln::optim
