// Reverse-mode rules: for each primitive, the cotangents of its inputs given the
// cotangent of its output. Rules are written in the public DSL, so running them
// inside a trace records them: gradients are programs, and grad of grad works.
#pragma once

#include <span>
#include <vector>

#include "kiln/dsl/program.hpp"

namespace kiln::detail {

// Cotangents for eq's inputs (null where an input has no gradient: integer or
// bool inputs, indices). `inputs` and `output` are the values of the forward pass.
std::vector<Array> vjp(const Equation& eq, std::span<const Array> inputs,
                       const Array& output, const Array& cotangent);

// Sums `g` over the axes that broadcasting added or stretched to reach g's shape
// from `shape`, then reshapes to `shape`.
Array unbroadcast(const Array& g, const Shape& shape);

}  // namespace kiln::detail
