// The optimizer state: a pytree (one KILN_MODULE struct of standard containers)
// so it flattens, checkpoints, and passes through grad and jit like a model.
// Its structure is fixed by the gradient template it was initialised from and
// never changes from step to step (seed 2).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "kiln/runtime/array.hpp"
#include "kiln/runtime/tree.hpp"

namespace kiln::optim {

// The state of one stage of a GradientTransformation.
struct StageState {
  // Which stage made it ("scale_by_adam"): a static leaf, so a state from
  // another optimizer is named as such rather than misread.
  std::string kind;
  // Per-leaf buffers ("mu", "nu", "trace"), each with one entry per array slot
  // of the gradient template, in flatten order: zeros (or initial values) where
  // the stage acts on a gradient, None where it does not.
  std::map<std::string, std::vector<Array>> leaves;
  // Dynamic 0-d scalars: "count" (i32), "learning_rate" (f32). Changing them
  // (set_learning_rate) never changes the structure, so never retraces.
  std::map<std::string, Array> scalars;
  KILN_MODULE(StageState, kind, leaves, scalars);
};

struct State {
  // The structure of the gradient template given to init: update checks every
  // gradient tree against it (a static leaf: it is part of the jit key).
  TreeDef gradient_structure;
  std::vector<StageState> stages;
  KILN_MODULE(State, gradient_structure, stages);
};

}  // namespace kiln::optim
