// Running and differentiating the control-flow primitives (family kControl).
// One driver serves eager calls (bodies evaluated op by op through eval) and
// compiled ones (each body an Executable, dsl/executable.cpp): the caller
// supplies how a sub-program runs.
#pragma once

#include <span>
#include <vector>

#include "absl/functional/function_ref.h"
#include "kiln/dsl/autodiff.hpp"
#include "kiln/dsl/program.hpp"

namespace kiln::detail {

// The sub-programs a control primitive runs, in the order RunBody numbers
// them: scan {body}; while {cond, body}; cond {branches...}; call {body};
// custom_vjp {primal} (its fwd and bwd run only in the backward pass).
std::vector<ProgramRef> sub_programs(Prim p, const Params& params);

// Runs sub-program k (of sub_programs()) on the given inputs.
using RunBody = absl::FunctionRef<std::vector<Array>(std::size_t, std::vector<Array>)>;
// Runs a control primitive on concrete inputs; `outs` are its result avals.
std::vector<Array> run_control(Prim p, const Params& params, std::span<const Array> inputs,
                               std::span<const Aval> outs, RunBody run);

// scan's result avals: final carry, stacked ys, and (save_carries) the carry
// before each iteration, stacked.
std::vector<Aval> scan_output_avals(const ScanLoopParams& q);

// The cotangents of a control equation's inputs (null where none), given its
// inputs, all its results and their cotangents (null = zero). Written in the
// DSL: inside a trace the backward pass is recorded (a reverse scan, a cond).
std::vector<Array> control_vjp(const Equation& eq, std::span<const Array> inputs,
                               std::span<const Array> outputs, std::span<const Array> cts);

// with_residuals (the program autodiff evaluates) is declared in
// dsl/autodiff.hpp.

}  // namespace kiln::detail
