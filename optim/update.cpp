// init, update and apply_updates on flattened trees: the structure checks
// (once per structure, cached) and each stage's arithmetic, written with DSL
// ops in the order Optax writes it so values agree to f32 rounding.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <mutex>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "kiln/optim/alias.hpp"
#include "kiln/optim/stage_math.hpp"
#include "kiln/optim/transform.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::optim::detail {
namespace {

using kiln::detail::join;
using kiln::detail::str_cat;

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

}  // namespace

// ---- state access with errors that say which stage and which entry ----
std::string StageCtx::where() const {
  return str_cat("stage ", index, " (", name, ")");
}

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

namespace {
// The state's entry i for `key`; a TreeError when it is None.
const Array& present_entry(const std::vector<Array>& entries, const StageCtx& c,
                           const std::string& key, std::size_t i,
                           const std::string& path) {
  const Array& e = entries[i];
  if (e.is_null()) {
    throw TreeError(str_cat("[optim.update] ", c.where(),
                            ": a gradient arrived at ", path,
                            " but the state's '", key, "' has None there"));
  }
  return e;
}
}  // namespace

const Array& state_entry_shaped(const std::vector<Array>& entries,
                                const StageCtx& c, const std::string& key,
                                std::size_t i, const Shape& shape) {
  const std::string path = tree::display_path(c.paths[i]);
  const Array& e = present_entry(entries, c, key, i, path);
  if (e.shape() != shape) {
    throw ShapeError(str_cat("[optim.update] ", c.where(), " at ", path,
                             ": the state's '", key, "' is ", name(e.dtype()),
                             to_string(e.shape()), " but this gradient needs ",
                             to_string(shape)));
  }
  return e;
}

const Array& state_entry(const std::vector<Array>& entries, const StageCtx& c,
                         const std::string& key, std::size_t i,
                         const Array& g) {
  const std::string path = tree::display_path(c.paths[i]);
  const Array& e = present_entry(entries, c, key, i, path);
  if (e.dtype() != g.dtype() || e.shape() != g.shape()) {
    throw ShapeError(str_cat("[optim.update] ", c.where(), " at ", path,
                             ": the gradient is ", name(g.dtype()),
                             to_string(g.shape()), " but the state's '", key,
                             "' is ", name(e.dtype()), to_string(e.shape())));
  }
  return e;
}

Hp StageIO::hp(const std::string& name, double value) const {
  if (!std::binary_search(stage.dynamic.begin(), stage.dynamic.end(), name))
    return Hp{value, Array()};
  return Hp{value, state_scalar(st, c, name)};
}

void StageIO::require_params() const {
  if (params_def == nullptr) {
    throw ValueError(str_cat("[optim.update] ", c.where(),
                             " needs the parameters: call opt.update(grads, "
                             "state, params)"));
  }
  for (std::size_t i : active) {
    if (params[i].is_null()) {
      throw TreeError(
          str_cat("[optim.update] ", c.where(), ": params has None at ",
                  tree::display_path(c.paths[i]), " where a gradient arrived"));
    }
  }
}

namespace {

// Array slots whose path no slot of `paths` lies under (for error messages).
void check_mask_paths(const Stage& stage, std::size_t k, const Paths& paths) {
  auto report = [&](const std::string& p, std::string_view what) {
    Paths shown;
    for (const std::string& q : paths) shown.push_back(tree::display_path(q));
    throw ValueError(str_cat(
        "[optim.init] stage ", k, " (", stage.name(), "): the ", what, " '", p,
        "' names no array slot; the slots are: ", join(shown, ", ")));
  };
  auto exists = [&](const std::string& p) {
    for (const std::string& q : paths)
      if (Mask::by_paths({p}).matches(q, Array())) return true;
    return false;
  };
  for (const Mask& m : stage.masks) {
    for (const std::string& p : m.paths)
      if (!exists(p)) report(p, "mask path");
    for (const auto& [p, label] : m.path_labels)
      if (!exists(p)) report(p, "labelled path");
  }
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
    check_mask_paths(stage, k, paths);
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
    InitIO io{st, live, active, device};
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
              // inject_hyperparams(opt, {"learning_rate"}): the schedule's
              // numbers are state too (set_schedule).
              if (std::binary_search(stage.dynamic.begin(), stage.dynamic.end(),
                                     "learning_rate")) {
                for (const Schedule::Parameter& p :
                     op.learning_rate.parameters()) {
                  st.scalars[p.name] =
                      scalar_on(p.value, p.integer ? i32 : f32, device);
                }
              }
            }
          } else if constexpr (std::is_same_v<Op, Freeze>) {
            for (std::size_t i = 0; i < live.size(); ++i) {
              if (active[i]) live[i] = Array();
            }
          } else if constexpr (std::is_same_v<Op, AddDecayedWeights> ||
                               std::is_same_v<Op, ClipByGlobalNorm>) {
            // stateless
          } else if constexpr (std::is_same_v<Op, MultiSteps> ||
                               std::is_same_v<Op, ApplyIfFinite>) {
            if constexpr (std::is_same_v<Op, MultiSteps>) {
              st.leaves["acc_grads"] = per_leaf(0);
              st.scalars["mini_step"] = scalar_on(0, i32, device);
              st.scalars["gradient_step"] = scalar_on(0, i32, device);
            } else {
              st.scalars["notfinite_count"] = scalar_on(0, i32, device);
              st.scalars["last_finite"] = scalar_on(1, DType::kBool, device);
              st.scalars["total_notfinite"] = scalar_on(0, i32, device);
            }
            if (k + static_cast<std::size_t>(op.inner_stages) >=
                opt.stages().size() + 1) {
              throw ValueError(
                  str_cat("[optim.init] stage ", k, " (", Op::kName,
                          ") covers ", op.inner_stages, " stages but only ",
                          opt.stages().size() - k - 1, " follow it"));
            }
          } else if constexpr (std::is_same_v<Op, LabelCheck>) {
            for (std::size_t i = 0; i < live.size(); ++i) {
              if (!active[i]) continue;
              const std::string label =
                  stage.masks.front().label_of(paths[i], live[i]);
              if (std::find(op.labels.begin(), op.labels.end(), label) ==
                  op.labels.end()) {
                throw ValueError(str_cat(
                    "[optim.multi_transform] ", tree::display_path(paths[i]),
                    label.empty() ? std::string(" has no label")
                                  : str_cat(" has label '", label, "'"),
                    "; the transforms are labelled ", join(op.labels, ", ")));
              }
            }
          } else {
            init_stage(op, io);
          }
        },
        stage.op);
    // Run-time hyperparameters (inject_hyperparams) start at the stage's
    // values, as f32 scalars.
    for (const auto& [name, value] : injectable_hyperparameters(stage.op)) {
      if (std::binary_search(stage.dynamic.begin(), stage.dynamic.end(), name))
        st.scalars[name] = scalar_on(value, f32, device);
    }
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
  std::vector<Guard> open;  // nested guards, innermost last
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
    StageIO io{stage, st, c, g, active, params_def, params};
    std::visit(
        [&]<class Op>(const Op& op) {
          (void)op;
          if constexpr (std::is_same_v<Op, ScaleByAdam>) {
            std::vector<Array>& mu = state_leaves(st, c, "mu");
            std::vector<Array>& nu = state_leaves(st, c, "nu");
            const Hp b1 = io.hp("b1", op.b1), b2 = io.hp("b2", op.b2);
            const Hp eps = io.hp("eps", op.eps);
            const Hp eps_root = io.hp("eps_root", op.eps_root);
            const Array count = safe_increment(state_scalar(st, c, "count"));
            const Array bc1 = bias_correction(b1, count);
            const Array bc2 = bias_correction(b2, count);
            for (std::size_t i : active) {
              const Array m =
                  g[i] * one_minus(b1) + state_entry(mu, c, "mu", i, g[i]) * b1;
              const Array v = g[i] * g[i] * one_minus(b2) +
                              state_entry(nu, c, "nu", i, g[i]) * b2;
              const Array m_hat = m / astype(bc1, m.dtype());
              const Array v_hat = v / astype(bc2, v.dtype());
              g[i] = m_hat / (sqrt(v_hat + eps_root) + eps);
              mu[i] = m;
              nu[i] = v;
            }
            st.scalars["count"] = count;
          } else if constexpr (std::is_same_v<Op, ScaleByRms>) {
            std::vector<Array>& nu = state_leaves(st, c, "nu");
            const Hp decay = io.hp("decay", op.decay);
            const Hp eps = io.hp("eps", op.eps);
            for (std::size_t i : active) {
              const Array v = g[i] * g[i] * one_minus(decay) +
                              state_entry(nu, c, "nu", i, g[i]) * decay;
              g[i] = rsqrt(v + eps) * g[i];
              nu[i] = v;
            }
          } else if constexpr (std::is_same_v<Op, Momentum>) {
            std::vector<Array>& trace = state_leaves(st, c, "trace");
            const Hp decay = io.hp("momentum", op.decay);
            for (std::size_t i : active) {
              const Array t =
                  g[i] + state_entry(trace, c, "trace", i, g[i]) * decay;
              g[i] = op.nesterov ? g[i] + t * decay : t;
              trace[i] = t;
            }
          } else if constexpr (std::is_same_v<Op, AddDecayedWeights>) {
            if (active.empty()) return;
            io.require_params();
            const Hp wd = io.hp("weight_decay", op.weight_decay);
            for (std::size_t i : active) g[i] = g[i] + params[i] * wd;
          } else if constexpr (std::is_same_v<Op, ClipByGlobalNorm>) {
            if (active.empty()) return;
            std::vector<Array> clipped;
            for (std::size_t i : active) clipped.push_back(g[i]);
            const Array norm = optim::global_norm(std::span<const Array>(clipped));
            const Hp max_norm = io.hp("max_norm", op.max_norm);
            const Array keep = max_norm.dynamic.is_null()
                                   ? norm < op.max_norm
                                   : norm < max_norm.dynamic;
            for (std::size_t i : active) {
              g[i] = where(keep, g[i],
                           (g[i] / astype(norm, g[i].dtype())) * max_norm);
            }
          } else if constexpr (std::is_same_v<Op, ScaleByLearningRate>) {
            Array step;
            if (op.learning_rate.is_constant()) {
              step = state_scalar(st, c, "learning_rate");
            } else {
              const Array count = state_scalar(st, c, "count");
              if (std::binary_search(stage.dynamic.begin(), stage.dynamic.end(),
                                     "learning_rate")) {
                step = op.learning_rate(count, [&](const std::string& name) {
                  return state_scalar(st, c, name);
                });
              } else {
                step = op.learning_rate(count);
              }
              st.scalars["count"] = safe_increment(count);
            }
            if (op.flip_sign) step = -step;
            for (std::size_t i : active)
              g[i] = astype(step, g[i].dtype()) * g[i];
          } else if constexpr (std::is_same_v<Op, Freeze>) {
            for (std::size_t i : active) g[i] = Array();
          } else if constexpr (std::is_same_v<Op, MultiSteps>) {
            // optax.MultiSteps: accumulate (Welford mean or sum), run the
            // inner stages on the accumulation, keep what they did only on
            // the every_k-th call.
            std::vector<Array>& acc = state_leaves(st, c, "acc_grads");
            const Array mini = state_scalar(st, c, "mini_step");
            const Array gstep = state_scalar(st, c, "gradient_step");
            const Array emit = mini == static_cast<double>(op.every_k - 1);
            const Array n = astype(mini + 1, f32);
            for (std::size_t i : active) {
              const Array& a = state_entry(acc, c, "acc_grads", i, g[i]);
              const Array next = op.use_grad_mean
                                     ? a + (g[i] - a) / astype(n, a.dtype())
                                     : g[i] + a;
              g[i] = next;
              acc[i] = astype(logical_not(emit), next.dtype()) * next;
            }
            st.scalars["mini_step"] =
                mod(safe_increment(mini),
                    full_like(mini, static_cast<double>(op.every_k)));
            st.scalars["gradient_step"] =
                where(emit, safe_increment(gstep), gstep);
            open_guard(open, out, k, op.inner_stages, emit, active, g);
          } else if constexpr (std::is_same_v<Op, ApplyIfFinite>) {
            open_guard(open, out, k, op.inner_stages,
                       apply_if_finite_keep(op, st, c, g, active), active, g);
          } else if constexpr (std::is_same_v<Op, LabelCheck>) {
            // checked at init; the labelled stages follow
          } else {
            update_stage(op, io);
          }
        },
        stage.op);
    while (!open.empty() && open.back().last == k) {
      close_guard(open.back(), out, g);
      open.pop_back();
    }
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
