// The value side of GradientTransformation: constructors (alias.hpp), masks
// and printing. The numerics are in update.cpp.
#include <ostream>

#include "kiln/optim/alias.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::optim {
namespace {

GradientTransformation one(StageOp op) {
  return GradientTransformation({Stage{std::move(op), {}}});
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
  return m != invert;
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
      os << "scale_by_learning_rate(" << a.learning_rate << ")";
    }
    void operator()(const Freeze&) { os << "freeze()"; }
  };
  std::visit(Print{os}, s.op);
  for (const Mask& m : s.masks) {
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
    if (!m.paths.empty())
      os << sep << "under " << kiln::detail::join(m.paths, " or ");
    os << ")";
  }
  return os;
}

std::ostream& operator<<(std::ostream& os, const GradientTransformation& t) {
  if (t.stages().size() == 1) return os << t.stages()[0];
  return os << "chain(" << kiln::detail::join(t.stages(), ", ") << ")";
}

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

}  // namespace kiln::optim
