// Run-time hyperparameters: values kept in the optimizer state as dynamic
// f32 scalars (constant learning rates always; others when
// inject_hyperparams names them), so changing one between steps needs no new
// program. inject_hyperparams itself only edits the optimizer value.
#include <algorithm>

#include "kiln/optim/alias.hpp"
#include "kiln/optim/stage_math.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::optim {

using kiln::detail::join;
using kiln::detail::str_cat;

GradientTransformation inject_hyperparams(const GradientTransformation& inner,
                                          std::vector<std::string> names) {
  std::vector<Stage> stages = inner.stages();
  std::vector<std::string> known;
  for (const std::string& name : names) {
    bool found = false;
    for (Stage& s : stages) {
      // A constant learning rate is always in the state; a schedule's
      // numbers go there when asked for.
      if (const auto* lr = std::get_if<ScaleByLearningRate>(&s.op)) {
        if (std::find(known.begin(), known.end(), "learning_rate") ==
            known.end())
          known.push_back("learning_rate");
        if (name == "learning_rate") {
          found = true;
          if (!lr->learning_rate.is_constant() &&
              !std::binary_search(s.dynamic.begin(), s.dynamic.end(), name)) {
            s.dynamic.insert(
                std::lower_bound(s.dynamic.begin(), s.dynamic.end(), name),
                name);
          }
        }
      }
      for (const auto& [hp, value] : detail::injectable_hyperparameters(s.op)) {
        if (std::find(known.begin(), known.end(), hp) == known.end())
          known.push_back(hp);
        if (hp != name) continue;
        found = true;
        if (!std::binary_search(s.dynamic.begin(), s.dynamic.end(), name)) {
          s.dynamic.insert(
              std::lower_bound(s.dynamic.begin(), s.dynamic.end(), name), name);
        }
      }
    }
    if (!found) {
      throw ValueError(
          str_cat("[optim.inject_hyperparams] no stage of ", inner,
                  " has a hyperparameter '", name, "'; they have: ",
                  known.empty() ? std::string("none") : join(known, ", ")));
    }
  }
  return GradientTransformation(std::move(stages));
}

namespace {
// Step counters (and apply_if_finite's record): state, but not
// hyperparameters.
bool is_counter(std::string_view name) {
  return name == "count" || name == "mini_step" || name == "gradient_step" ||
         name == "notfinite_count" || name == "last_finite" ||
         name == "total_notfinite";
}
std::vector<std::string> hyperparameter_names(const State& state) {
  std::vector<std::string> out;
  for (const StageState& s : state.stages) {
    for (const auto& [name, value] : s.scalars) {
      if (!is_counter(name) &&
          std::find(out.begin(), out.end(), name) == out.end())
        out.push_back(name);
    }
  }
  return out;
}
}  // namespace

State set_hyperparameter(const State& state, std::string_view name,
                         double value) {
  State out = state;
  bool found = false;
  if (!is_counter(name)) {
    for (StageState& s : out.stages) {
      auto it = s.scalars.find(std::string(name));
      if (it == s.scalars.end()) continue;
      it->second =
          full(Shape{}, value, it->second.dtype(), it->second.device());
      found = true;
    }
  }
  if (!found) {
    const std::vector<std::string> names = hyperparameter_names(state);
    throw ValueError(str_cat(
        "[optim.set_hyperparameter] this optimizer state has no run-time '",
        name,
        "'; it has: ", names.empty() ? std::string("none") : join(names, ", "),
        " (make one run-time with optim::inject_hyperparams(opt, {\"", name,
        "\"}))"));
  }
  return out;
}

State set_schedule(const State& state, const Schedule& schedule) {
  const std::vector<Schedule::Parameter> params = schedule.parameters();
  std::vector<std::string> want;
  for (const Schedule::Parameter& p : params) want.push_back(p.name);
  std::sort(want.begin(), want.end());
  State out = state;
  bool found = false;
  for (StageState& s : out.stages) {
    std::vector<std::string> have;
    for (const auto& [name, value] : s.scalars) {
      if (name.starts_with("schedule")) have.push_back(name);
    }
    if (have.empty()) continue;
    std::sort(have.begin(), have.end());
    if (have != want) {
      throw ValueError(str_cat(
          "[optim.set_schedule] ", schedule,
          " does not have the shape of the state's schedule: it has the "
          "numbers ",
          join(want, ", "), " but the state has ", join(have, ", ")));
    }
    for (const Schedule::Parameter& p : params) {
      Array& a = s.scalars.at(p.name);
      a = full(Shape{}, p.value, a.dtype(), a.device());
    }
    found = true;
  }
  if (!found) {
    throw ValueError(
        "[optim.set_schedule] this optimizer state has no run-time schedule "
        "(make one with optim::inject_hyperparams(opt, {\"learning_rate\"}) "
        "on an optimizer whose learning rate is a schedule)");
  }
  return out;
}

Array hyperparameter(const State& state, std::string_view name) {
  if (!is_counter(name)) {
    for (const StageState& s : state.stages) {
      auto it = s.scalars.find(std::string(name));
      if (it != s.scalars.end()) return it->second;
    }
  }
  const std::vector<std::string> names = hyperparameter_names(state);
  throw ValueError(str_cat(
      "[optim.hyperparameter] this optimizer state has no run-time '", name,
      "'; it has: ", names.empty() ? std::string("none") : join(names, ", ")));
}

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
