// The optimizer state: a pytree (one KILN_MODULE struct of standard containers)
// so it flattens, checkpoints, and passes through grad and jit like a model.
// Its structure is fixed by the gradient template it was initialised from and
// never changes from step to step (seed 2).
#pragma once

#include <map>
#include <span>
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

  // How a checkpoint names the state's arrays (see NodeInfo::member_paths):
  // a per-parameter buffer by the parameter's path in the gradient structure,
  // "stages[0].leaves[\"mu\"][2]" as "stages[0].mu.layers[1].weight" (keys that
  // are not identifiers, or are a StageState field's name, stay quoted:
  // "stages[0].leaves[\"odd key\"].layers[1].weight"); scalars keep their tree
  // paths. Only names in the file change, so the structure (and the jit key)
  // does not.
  static void kiln_member_paths(std::span<const StaticValue> statics,
                                std::span<std::string> paths);
};

}  // namespace kiln::optim
