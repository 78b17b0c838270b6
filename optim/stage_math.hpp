// optim's internal helpers shared by update.cpp (the loop over stages, the
// first optimizers), stages.cpp (the stages added for issue 18) and guard.cpp
// (multi_steps' and apply_if_finite's guards): state access with errors that
// name the stage and path, and run-time hyperparameters. Not installed.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/optim/transform.hpp"

namespace kiln::optim::detail {

using Paths = std::vector<std::string>;

// One path per array slot (array or None) of a gradient structure, in flatten
// order: what StageState::leaves vectors are indexed by.
Paths array_slot_paths(const TreeDef& def);

struct StageCtx {
  std::size_t index;
  std::string_view name;
  const Paths& paths;
  std::string where() const;
};

const Array& state_scalar(const StageState& s, const StageCtx& c,
                          const std::string& key);
std::vector<Array>& state_leaves(StageState& s, const StageCtx& c,
                                 const std::string& key);
// The state entry for a gradient at slot i: present, same dtype and shape.
const Array& state_entry(const std::vector<Array>& entries, const StageCtx& c,
                         const std::string& key, std::size_t i, const Array& g);
// The state entry at slot i: present, with the given shape (adafactor's
// factored moments are not shaped like the gradient).
const Array& state_entry_shaped(const std::vector<Array>& entries,
                                const StageCtx& c, const std::string& key,
                                std::size_t i, const Shape& shape);

inline Array safe_increment(const Array& count) {
  const double max = std::numeric_limits<std::int32_t>::max();
  return where(count < max, count + 1, count);
}

inline Array scalar_on(double v, DType dtype, Device device) {
  return full(Shape{}, v, dtype, device);
}

// A hyperparameter as a stage reads it: a constant from the stage (folded in
// double, as Python folds `1 - b1` before it meets an f32 array) or, when
// inject_hyperparams made it dynamic, the state's f32 0-d scalar (then the
// arithmetic is f32, as in optax.inject_hyperparams).
struct Hp {
  double value = 0;
  Array dynamic;  // null: constant
};
inline Array operator*(const Array& a, const Hp& h) {
  return h.dynamic.is_null() ? a * h.value : a * astype(h.dynamic, a.dtype());
}
inline Array operator+(const Array& a, const Hp& h) {
  return h.dynamic.is_null() ? a + h.value : a + astype(h.dynamic, a.dtype());
}
inline Hp one_minus(const Hp& h) {
  return h.dynamic.is_null() ? Hp{1.0 - h.value, Array()}
                             : Hp{0.0, 1.0 - h.dynamic};
}
// 1 - decay^count in f32, as optax's bias correction.
inline Array bias_correction(const Hp& decay, const Array& count) {
  const Array c = astype(count, f32);
  return 1.0 - (decay.dynamic.is_null() ? power(decay.value, c)
                                        : power(decay.dynamic, c));
}

// What one stage's update works on.
struct StageIO {
  const Stage& stage;
  StageState& st;
  const StageCtx& c;
  std::vector<Array>& g;                   // the updates, one per slot
  const std::vector<std::size_t>& active;  // the slots this stage acts on
  const TreeDef* params_def;               // null: no params given
  std::span<const Array> params;

  // The hyperparameter `name` (value `value` in the stage), dynamic when the
  // stage lists it in Stage::dynamic.
  Hp hp(const std::string& name, double value) const;
  // The params at the active slots (ValueError / TreeError naming the stage
  // when missing).
  void require_params() const;
};

// What one stage's init works on: the active slots and the templates.
struct InitIO {
  StageState& st;
  const std::vector<Array>& live;  // the gradient template, None where skipped
  const std::vector<bool>& active;
  Device device;
};

// An open multi_steps or apply_if_finite (guard.cpp): the inner stages
// [first, last] run; when `keep` is false their state stays as it was and
// the updates it governs are zero.
struct Guard {
  std::size_t first, last;
  Array keep;                       // bool 0-d
  std::vector<StageState> before;   // the inner stages' state at entry
  std::vector<std::size_t> active;  // the slots it governs
};
// Opens a guard over the `inner` stages after stage k of `out` (with none,
// applies `keep` to the updates now).
void open_guard(std::vector<Guard>& open, const State& out, std::size_t k,
                std::int64_t inner, const Array& keep,
                const std::vector<std::size_t>& active, std::vector<Array>& g);
// After the guard's last stage: their state and the updates, kept or not.
void close_guard(const Guard& guard, State& out, std::vector<Array>& g);
// apply_if_finite's step: records it in the stage's scalars and returns
// whether the inner stages apply (finite, or too many bad steps in a row).
Array apply_if_finite_keep(const ApplyIfFinite& op, StageState& st,
                           const StageCtx& c, const std::vector<Array>& g,
                           const std::vector<std::size_t>& active);

// The stages of issue 18 (stages.cpp). One overload per StageOp alternative
// that update.cpp does not handle itself.
#define KILN_OPTIM_MORE_STAGES_(X) \
  X(ScaleByLion)                   \
  X(ScaleByRss)                    \
  X(Clip)                          \
  X(ScaleByTrustRatio)             \
  X(ScaleByFactoredRms)            \
  X(ClipByBlockRms)                \
  X(ScaleByParamBlockRms)          \
  X(Scale)                         \
  X(Ema)
#define KILN_OPTIM_DECLARE_(T)              \
  void init_stage(const T& op, InitIO& io); \
  void update_stage(const T& op, StageIO& io);
KILN_OPTIM_MORE_STAGES_(KILN_OPTIM_DECLARE_)
#undef KILN_OPTIM_DECLARE_

// (name, value) of each hyperparameter of `op` that inject_hyperparams can
// make dynamic.
std::vector<std::pair<std::string, double>> injectable_hyperparameters(
    const StageOp& op);

}  // namespace kiln::optim::detail
