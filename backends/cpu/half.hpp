// f16 and bf16 on the CPU backend (half.cpp): stored as 16-bit floats,
// computed in f32.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "kiln/backends/cpu/elementwise.hpp"
#include "kiln/dsl/backend.hpp"
#include "kiln/dsl/fusion.hpp"

namespace kiln::cpu {

// Whether `p` on these operands does arithmetic on f16 or bf16 (inputs or
// result).
bool computes_in_f32(Prim p, std::span<const Array> inputs, const Aval& out);
// Runs `p` through `backend` on f32 copies of the 16-bit float inputs and
// rounds a 16-bit float result from f32.
std::shared_ptr<Buffer> eval_in_f32(Backend& backend, Prim p, const Params& params,
                                    std::span<const Array> inputs, const Aval& out);
// Whether a fused group touches f16 or bf16: an elementwise one runs as
// computed_in_f32(k) (an anchored one's group too, its anchor through eval), so
// each result rounds as an unfused program's would.
bool has_16bit_float(const FusedKernel& k);
// An elementwise kernel with the same inputs and outputs that computes in f32:
// each 16-bit float value read by arithmetic is widened (an astype to f32, once
// per value), each 16-bit float result is computed in f32 and rounded into its
// value (an astype to the 16-bit dtype), as eval_in_f32 does per primitive;
// aliases (bitcast, stop_gradient) keep moving the words. So the fused
// interpreter runs it in blocks, with the unfused bits.
FusedKernel computed_in_f32(const FusedKernel& k);
// The flat kernel of astype between f16/bf16 and f32 (the conversions of
// computed_in_f32's bodies); null for any other pair.
FlatKernel half_astype_kernel(DType in, DType out);

}  // namespace kiln::cpu
