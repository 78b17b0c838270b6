// f16 and bf16 on the CPU backend (half.cpp): stored as 16-bit floats,
// computed in f32.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "kiln/dsl/backend.hpp"

namespace kiln::cpu {

// Whether `p` on these operands does arithmetic on f16 or bf16 (inputs or
// result).
bool computes_in_f32(Prim p, std::span<const Array> inputs, const Aval& out);
// Runs `p` through `backend` on f32 copies of the 16-bit float inputs and
// rounds a 16-bit float result from f32.
std::shared_ptr<Buffer> eval_in_f32(Backend& backend, Prim p, const Params& params,
                                    std::span<const Array> inputs, const Aval& out);
// Whether a fused group touches f16 or bf16; such a group runs equation by
// equation (eval_stepwise), each rounding as an unfused program would.
bool has_16bit_float(const FusedKernel& k);
std::vector<std::shared_ptr<Buffer>> eval_stepwise(Backend& backend, const FusedKernel& k,
                                                   std::span<const Array> inputs);

}  // namespace kiln::cpu
