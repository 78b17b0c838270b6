// Program: the IR a trace produces. SSA values with avals (dtype + shape) and one
// equation per primitive binding, in order. It prints like a jaxpr, evaluates by
// re-binding each equation (eagerly, or into an enclosing trace), and has the
// passes the transforms run before execution: DCE, CSE, scalar-constant folding.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "kiln/dsl/primitive.hpp"

namespace kiln {

using ValueId = std::int32_t;

struct Equation {
  Prim prim;
  Params params;
  absl::InlinedVector<ValueId, 3> inputs;
  ValueId output;  // the result (a control-flow primitive's first result)
  // A control-flow primitive's (family kControl) results after the first;
  // empty for every other primitive.
  std::vector<ValueId> more_outputs = {};
};

// Every result of `eq`, in order.
inline absl::InlinedVector<ValueId, 4> outputs_of(const Equation& eq) {
  absl::InlinedVector<ValueId, 4> out{eq.output};
  out.insert(out.end(), eq.more_outputs.begin(), eq.more_outputs.end());
  return out;
}

struct Program {
  std::vector<Aval> avals;  // indexed by ValueId
  std::vector<ValueId> inputs;
  std::vector<std::string> input_names;  // tree paths; may be empty strings
  std::vector<ValueId> constants;        // values bound to concrete arrays
  std::vector<Array> constant_values;
  std::vector<Equation> equations;
  std::vector<ValueId> outputs;
  std::vector<std::string> output_names;

  // Special members out of line (program.cpp): code that holds a Program
  // does not instantiate the equation vector's destructor and copies.
  Program();
  Program(const Program&);
  Program(Program&&) noexcept;
  Program& operator=(const Program&);
  Program& operator=(Program&&) noexcept;
  ~Program();

  ValueId new_value(const Aval& aval);
  std::size_t num_values() const { return avals.size(); }
};

// Readable text, one equation per line:
//   { lambda c0:f32[] ; a:f32[2,3] (x) b:f32[3] (b). let
//       d:f32[2,3] = add a b
//       e:f32[] = sum[axes=(0, 1)] d
//     in (e) }
std::string to_string(const Program& p);

// Runs `p` on `inputs` (one per p.inputs) by re-binding every equation through
// detail::bind: eager on concrete arrays, recorded when a trace is active.
std::vector<Array> eval(const Program& p, std::span<const Array> inputs);
// As eval, also returning every value (indexed by ValueId; null if not computed).
std::vector<Array> eval_all(const Program& p, std::span<const Array> inputs);

// Removes equations whose outputs no output depends on (and unused constants).
void eliminate_dead_code(Program& p);
// Merges equations with the same primitive, params and inputs; merges constants
// that are the same array.
void eliminate_common_subexpressions(Program& p);
// Evaluates, at trace time, equations whose inputs are all small constants (up to
// kFoldMaxElements elements), replacing them by constants.
inline constexpr std::int64_t kFoldMaxElements = 1;
void fold_scalar_constants(Program& p);
// Layout algebra: transpose of a transpose becomes one transpose, reshape of a
// reshape one reshape, identity transposes/reshapes disappear, and transposes
// of the last two axes fold into matmul (Params::transpose_a/b; also
// transpose(a @ b) = b^T @ a^T).
void simplify_layout(Program& p);
// Layout simplification + DCE + CSE + folding, to a fixed point.
void optimize(Program& p);

}  // namespace kiln
