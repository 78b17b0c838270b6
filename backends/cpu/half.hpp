// f16 on the CPU backend (half.cpp): stored as halves, computed in f32.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "kiln/dsl/backend.hpp"

namespace kiln::cpu {

// Whether `p` on these operands does arithmetic on f16 (inputs or result).
bool computes_in_f32(Prim p, std::span<const Array> inputs, const Aval& out);
// Runs `p` through `backend` on f32 copies of the f16 inputs and rounds an f16
// result from f32.
std::shared_ptr<Buffer> eval_in_f32(Backend& backend, Prim p, const Params& params,
                                    std::span<const Array> inputs, const Aval& out);
// Whether a fused group touches f16; such a group runs equation by equation
// (eval_stepwise), each rounding to f16 as an unfused program would.
bool has_f16(const FusedKernel& k);
std::vector<std::shared_ptr<Buffer>> eval_stepwise(Backend& backend, const FusedKernel& k,
                                                   std::span<const Array> inputs);

}  // namespace kiln::cpu
