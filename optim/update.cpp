// init, update and apply_updates on flattened trees: the structure checks
// (once per structure, cached) and each stage's arithmetic, written with DSL
// ops in the order Optax writes it so values agree to f32 rounding.
#include <cstdint>
#include <limits>
#include <mutex>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "kiln/optim/transform.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::optim::detail {
namespace {

using kiln::detail::join;
using kiln::detail::str_cat;

using Paths = std::vector<std::string>;

// One path per array slot (array or None), in flatten order.
Paths array_slot_paths(const TreeDef& def) {
  Paths out;
  for (const SlotPath& s : tree::slot_paths(def)) {
    if (s.kind != NodeKind::kStatic) out.push_back(s.path);
  }
  return out;
}

// Structures that passed a check, with their slot paths. A training loop
// calls update with the same few structures every step, so the diff and path
// formatting run once per structure; a hit costs a hash lookup and a TreeDef
// ==.
class CheckedCache {
 public:
  using Key =
      std::tuple<int, TreeDef, TreeDef>;  // (which check, expected, got)
  std::shared_ptr<const Paths> find(const Key& key) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    return it == map_.end() ? nullptr : it->second;
  }
  std::shared_ptr<const Paths> insert(const Key& key, Paths paths) {
    auto p = std::make_shared<const Paths>(std::move(paths));
    std::lock_guard<std::mutex> lock(mu_);
    if (map_.size() >= kMaxEntries) map_.clear();  // a bound, not an LRU
    map_.emplace(key, p);
    return p;
  }

 private:
  static constexpr std::size_t kMaxEntries = 1024;
  std::mutex mu_;
  absl::flat_hash_map<Key, std::shared_ptr<const Paths>> map_;
};

CheckedCache& checked_cache() {
  static CheckedCache* cache =
      new CheckedCache();  // never destroyed: no exit-order issue
  return *cache;
}

// Differences between `expected` and `got` other than None in `got` where
// `expected` has an array (parameters that get no update).
std::vector<tree::Difference> diff_except_none_in_got(const TreeDef& expected,
                                                      const TreeDef& got) {
  std::vector<tree::Difference> diffs = tree::diff(expected, got);
  std::erase_if(diffs, [](const tree::Difference& d) {
    return d.kind == tree::DiffKind::kNoneVsArray &&
           d.description == str_cat("expected ", name(NodeKind::kArray),
                                    ", got ", name(NodeKind::kNone));
  });
  return diffs;
}

constexpr int kGradsCheck = 0;
constexpr int kParamsCheck = 1;
constexpr int kApplyCheck = 2;

std::shared_ptr<const Paths> check_grads(const TreeDef& expected,
                                         const TreeDef& got) {
  const CheckedCache::Key key{kGradsCheck, expected, got};
  if (auto hit = checked_cache().find(key)) return hit;
  if (!(expected == got)) {
    throw TreeError(
        str_cat("[optim.update] the gradient tree does not have the structure "
                "the optimizer "
                "state was initialised with:\n",
                tree::format_diff(tree::diff(expected, got)),
                "\n(expected = the tree given to init, got = these gradients). "
                "Initialise the "
                "state with opt.init(optim::gradient_template(model)): it has "
                "None exactly "
                "where grad gives None (integer arrays, Frozen, None), so the "
                "structure "
                "stays the same at every step"));
  }
  return checked_cache().insert(key, array_slot_paths(got));
}

void check_params(const TreeDef& grads, const TreeDef& params) {
  const CheckedCache::Key key{kParamsCheck, grads, params};
  if (checked_cache().find(key)) return;
  std::vector<tree::Difference> diffs = diff_except_none_in_got(params, grads);
  if (!diffs.empty()) {
    throw TreeError(str_cat(
        "[optim.update] the params do not have the structure of the "
        "gradients:\n",
        tree::format_diff(diffs), "\n(expected = params, got = gradients)"));
  }
  checked_cache().insert(key, {});
}

// ---- state access with errors that say which stage and which entry ----
struct StageCtx {
  std::size_t index;
  std::string_view name;
  const Paths& paths;
  std::string where() const {
    return str_cat("stage ", index, " (", name, ")");
  }
};

const Array& state_scalar(const StageState& s, const StageCtx& c,
                          const std::string& key) {
  auto it = s.scalars.find(key);
  if (it == s.scalars.end() || it->second.is_null()) {
    throw TreeError(str_cat("[optim.update] ", c.where(),
                            ": the state has no scalar '", key,
                            "'; was it made by this optimizer's init?"));
  }
  return it->second;
}

std::vector<Array>& state_leaves(StageState& s, const StageCtx& c,
                                 const std::string& key) {
  auto it = s.leaves.find(key);
  if (it == s.leaves.end() || it->second.size() != c.paths.size()) {
    throw TreeError(
        str_cat("[optim.update] ", c.where(), ": the state's '", key, "' ",
                it == s.leaves.end()
                    ? std::string("is missing")
                    : str_cat("has ", it->second.size(), " entries for ",
                              c.paths.size(), " gradient slots"),
                "; was it made by this optimizer's init?"));
  }
  return it->second;
}

// The state entry for a gradient at slot i: present, same dtype and shape.
const Array& state_entry(const std::vector<Array>& entries, const StageCtx& c,
                         const std::string& key, std::size_t i,
                         const Array& g) {
  const Array& e = entries[i];
  const std::string path = tree::display_path(c.paths[i]);
  if (e.is_null()) {
    throw TreeError(str_cat("[optim.update] ", c.where(),
                            ": a gradient arrived at ", path,
                            " but the state's '", key, "' has None there"));
  }
  if (e.dtype() != g.dtype() || e.shape() != g.shape()) {
    throw ShapeError(str_cat("[optim.update] ", c.where(), " at ", path,
                             ": the gradient is ", name(g.dtype()),
                             to_string(g.shape()), " but the state's '", key,
                             "' is ", name(e.dtype()), to_string(e.shape())));
  }
  return e;
}

Array safe_increment(const Array& count) {
  const double max = std::numeric_limits<std::int32_t>::max();
  return where(count < max, count + 1, count);
}

Array scalar_on(double v, DType dtype, Device device) {
  return full(Shape{}, v, dtype, device);
}

// 1 - decay^count, in f32 as Optax computes it.
Array bias_correction(double decay, const Array& count) {
  return 1.0 - power(decay, astype(count, f32));
}

}  // namespace

State init_flat(const GradientTransformation& opt, const TreeDef& def,
                std::span<const Array> slots) {
  const Paths paths = array_slot_paths(def);
  Device device = default_device();
  for (const Array& a : slots) {
    if (!a.is_null()) {
      device = a.device();
      break;
    }
  }
  std::vector<Array> live(slots.begin(), slots.end());
  State state;
  state.gradient_structure = def;
  for (std::size_t k = 0; k < opt.stages().size(); ++k) {
    const Stage& stage = opt.stages()[k];
    for (const Mask& m : stage.masks) {
      for (const std::string& p : m.paths) {
        bool found = false;
        for (const std::string& q : paths)
          found = found || Mask::by_paths({p}).matches(q, Array());
        if (!found) {
          Paths shown;
          for (const std::string& q : paths)
            shown.push_back(tree::display_path(q));
          throw ValueError(str_cat(
              "[optim.init] stage ", k, " (", stage.name(),
              "): the mask path '", p,
              "' names no array slot; the slots are: ", join(shown, ", ")));
        }
      }
    }
    std::vector<bool> active(live.size());
    for (std::size_t i = 0; i < live.size(); ++i) {
      active[i] = !live[i].is_null();
      for (const Mask& m : stage.masks)
        active[i] = active[i] && m.matches(paths[i], live[i]);
    }
    auto per_leaf = [&](double value) {
      std::vector<Array> out(live.size());
      for (std::size_t i = 0; i < live.size(); ++i) {
        if (active[i])
          out[i] = value == 0 ? zeros_like(live[i]) : full_like(live[i], value);
      }
      return out;
    };
    StageState st;
    st.kind = std::string(stage.name());
    std::visit(
        [&]<class Op>(const Op& op) {
          (void)op;
          if constexpr (std::is_same_v<Op, ScaleByAdam>) {
            st.leaves["mu"] = per_leaf(0);
            st.leaves["nu"] = per_leaf(0);
            st.scalars["count"] = scalar_on(0, i32, device);
          } else if constexpr (std::is_same_v<Op, ScaleByRms>) {
            st.leaves["nu"] = per_leaf(op.initial_scale);
          } else if constexpr (std::is_same_v<Op, Momentum>) {
            st.leaves["trace"] = per_leaf(0);
          } else if constexpr (std::is_same_v<Op, ScaleByLearningRate>) {
            if (op.learning_rate.is_constant()) {
              st.scalars["learning_rate"] =
                  scalar_on(op.learning_rate.constant_value(), f32, device);
            } else {
              st.scalars["count"] = scalar_on(0, i32, device);
            }
          } else if constexpr (std::is_same_v<Op, Freeze>) {
            for (std::size_t i = 0; i < live.size(); ++i) {
              if (active[i]) live[i] = Array();
            }
          }
        },
        stage.op);
    state.stages.push_back(std::move(st));
  }
  return state;
}

std::pair<std::vector<Array>, State> update_flat(
    const GradientTransformation& opt, const TreeDef& grads_def,
    std::vector<Array> g, const State& state, const TreeDef* params_def,
    std::span<const Array> params) {
  const std::shared_ptr<const Paths> paths_ptr =
      check_grads(state.gradient_structure, grads_def);
  const Paths& paths = *paths_ptr;
  if (params_def != nullptr) check_params(grads_def, *params_def);
  if (state.stages.size() != opt.stages().size()) {
    throw TreeError(
        str_cat("[optim.update] the state has ", state.stages.size(),
                " stages but the optimizer has ", opt.stages().size(),
                "; was it made by this optimizer's init?"));
  }
  State out;
  out.gradient_structure = state.gradient_structure;
  out.stages = state.stages;
  for (std::size_t k = 0; k < opt.stages().size(); ++k) {
    const Stage& stage = opt.stages()[k];
    StageState& st = out.stages[k];
    const StageCtx c{k, stage.name(), paths};
    if (st.kind != stage.name()) {
      throw TreeError(
          str_cat("[optim.update] stage ", k, " of the state was made by ",
                  st.kind, " but this optimizer's stage ", k, " is ",
                  stage.name(), "; was the state made by another optimizer?"));
    }
    std::vector<std::size_t> active;
    for (std::size_t i = 0; i < g.size(); ++i) {
      bool on = !g[i].is_null();
      for (const Mask& m : stage.masks) on = on && m.matches(paths[i], g[i]);
      if (on) active.push_back(i);
    }
    std::visit(
        [&]<class Op>(const Op& op) {
          (void)op;
          if constexpr (std::is_same_v<Op, ScaleByAdam>) {
            std::vector<Array>& mu = state_leaves(st, c, "mu");
            std::vector<Array>& nu = state_leaves(st, c, "nu");
            const Array count = safe_increment(state_scalar(st, c, "count"));
            const Array bc1 = bias_correction(op.b1, count);
            const Array bc2 = bias_correction(op.b2, count);
            for (std::size_t i : active) {
              const Array m = g[i] * (1.0 - op.b1) +
                              state_entry(mu, c, "mu", i, g[i]) * op.b1;
              const Array v = g[i] * g[i] * (1.0 - op.b2) +
                              state_entry(nu, c, "nu", i, g[i]) * op.b2;
              const Array m_hat = m / astype(bc1, m.dtype());
              const Array v_hat = v / astype(bc2, v.dtype());
              g[i] = m_hat / (sqrt(v_hat + op.eps_root) + op.eps);
              mu[i] = m;
              nu[i] = v;
            }
            st.scalars["count"] = count;
          } else if constexpr (std::is_same_v<Op, ScaleByRms>) {
            std::vector<Array>& nu = state_leaves(st, c, "nu");
            for (std::size_t i : active) {
              const Array v = g[i] * g[i] * (1.0 - op.decay) +
                              state_entry(nu, c, "nu", i, g[i]) * op.decay;
              g[i] = rsqrt(v + op.eps) * g[i];
              nu[i] = v;
            }
          } else if constexpr (std::is_same_v<Op, Momentum>) {
            std::vector<Array>& trace = state_leaves(st, c, "trace");
            for (std::size_t i : active) {
              const Array t =
                  g[i] + state_entry(trace, c, "trace", i, g[i]) * op.decay;
              g[i] = op.nesterov ? g[i] + t * op.decay : t;
              trace[i] = t;
            }
          } else if constexpr (std::is_same_v<Op, AddDecayedWeights>) {
            if (active.empty()) return;
            if (params_def == nullptr) {
              throw ValueError(str_cat(
                  "[optim.update] ", c.where(),
                  " needs the parameters: call opt.update(grads, state, "
                  "params)"));
            }
            for (std::size_t i : active) {
              if (params[i].is_null()) {
                throw TreeError(str_cat(
                    "[optim.update] ", c.where(), ": params has None at ",
                    tree::display_path(paths[i]), " where a gradient arrived"));
              }
              g[i] = g[i] + params[i] * op.weight_decay;
            }
          } else if constexpr (std::is_same_v<Op, ClipByGlobalNorm>) {
            if (active.empty()) return;
            Array sq;
            for (std::size_t i : active) {
              const Array s = astype(sum(g[i] * g[i]), f32);
              sq = sq.is_null() ? s : sq + s;
            }
            const Array norm = sqrt(sq);
            const Array keep = norm < op.max_norm;
            for (std::size_t i : active) {
              g[i] = where(keep, g[i],
                           (g[i] / astype(norm, g[i].dtype())) * op.max_norm);
            }
          } else if constexpr (std::is_same_v<Op, ScaleByLearningRate>) {
            Array step;
            if (op.learning_rate.is_constant()) {
              step = -state_scalar(st, c, "learning_rate");
            } else {
              const Array count = state_scalar(st, c, "count");
              step = -op.learning_rate(count);
              st.scalars["count"] = safe_increment(count);
            }
            for (std::size_t i : active)
              g[i] = astype(step, g[i].dtype()) * g[i];
          } else if constexpr (std::is_same_v<Op, Freeze>) {
            for (std::size_t i : active) g[i] = Array();
          }
        },
        stage.op);
  }
  return {std::move(g), std::move(out)};
}

std::vector<Array> apply_updates_flat(const TreeDef& params_def,
                                      std::span<const Array> params,
                                      const TreeDef& updates_def,
                                      std::span<const Array> updates) {
  const CheckedCache::Key key{kApplyCheck, params_def, updates_def};
  std::shared_ptr<const Paths> paths = checked_cache().find(key);
  if (paths == nullptr) {
    std::vector<tree::Difference> diffs =
        diff_except_none_in_got(params_def, updates_def);
    if (!diffs.empty()) {
      throw TreeError(str_cat(
          "[optim.apply_updates] the updates do not have the structure of the "
          "params:\n",
          tree::format_diff(diffs), "\n(expected = params, got = updates)"));
    }
    paths = checked_cache().insert(key, array_slot_paths(params_def));
  }
  std::vector<Array> out(params.begin(), params.end());
  for (std::size_t i = 0; i < out.size(); ++i) {
    const Array& u = updates[i];
    if (u.is_null()) continue;
    const Array& p = params[i];
    if (p.shape() != u.shape()) {
      throw ShapeError(
          str_cat("[optim.apply_updates] at ", tree::display_path((*paths)[i]),
                  ": the param has shape ", to_string(p.shape()),
                  " but the update has shape ", to_string(u.shape())));
    }
    out[i] = p + (u.dtype() == p.dtype() ? u : astype(u, p.dtype()));
  }
  return out;
}

}  // namespace kiln::optim::detail

namespace kiln::optim {

State set_learning_rate(const State& state, double learning_rate) {
  State out = state;
  bool found = false;
  for (StageState& s : out.stages) {
    auto it = s.scalars.find("learning_rate");
    if (it == s.scalars.end()) continue;
    it->second =
        full(Shape{}, learning_rate, it->second.dtype(), it->second.device());
    found = true;
  }
  if (!found) {
    throw ValueError(
        "[optim.set_learning_rate] this optimizer state has no constant "
        "learning rate "
        "(a schedule computes it from the step count)");
  }
  return out;
}

Array learning_rate(const State& state) {
  for (const StageState& s : state.stages) {
    auto it = s.scalars.find("learning_rate");
    if (it != s.scalars.end()) return it->second;
  }
  throw ValueError(
      "[optim.learning_rate] this optimizer state has no constant learning "
      "rate "
      "(a schedule computes it from the step count)");
}

}  // namespace kiln::optim
