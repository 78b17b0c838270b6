// Fusion: splits an optimized Program into launch steps. A step is one primitive
// binding, or a FusedKernel: a group of elementwise equations (with implicit
// broadcasting) computed in one pass over one iteration shape, so intermediates
// never reach memory. Backends run a FusedKernel through Backend::eval_fused; the
// default there evaluates the body equation by equation, so a backend without a
// fused kernel is correct, only slower.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kiln/dsl/program.hpp"

namespace kiln {

// A fused elementwise group. `body` is a Program whose inputs are the group's
// inputs (arrays broadcast-compatible with `shape`), whose equations are all
// elementwise (unary, binary, where, astype, bitcast, stop_gradient) and whose
// outputs all have shape `shape`. It has no constants: a constant used by the
// group is an input of the step.
struct FusedKernel {
  Program body;
  Shape shape;
};

// One launch of a compiled program: a single equation, or a fused kernel. Values
// are the outer program's ValueIds.
struct Step {
  const Equation* equation = nullptr;          // single binding (points into the program)
  std::shared_ptr<const FusedKernel> kernel;   // or a fused group
  std::vector<ValueId> inputs;                 // fused: one per body input
  std::vector<ValueId> outputs;                // fused: one per body output
};

struct FusionOptions {
  bool enabled = true;  // KILN_FUSION=0 turns fusion off (one step per equation)
};

// The launch steps of `p`, in an order that respects dependencies. `p` must
// outlive the result (single steps point at its equations).
std::vector<Step> fuse(const Program& p, const FusionOptions& options = {});

// The program with its kernel boundaries, for debugging:
//   fused[shape=(128,256)] { lambda ; a:f32[128,256] b:f32[256]. let ... }
std::string to_string(const Program& p, const std::vector<Step>& steps);

// Whether `prim` can be part of a fused elementwise group.
bool fusible(Prim prim);

}  // namespace kiln
