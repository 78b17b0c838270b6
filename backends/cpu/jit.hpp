// Run-time code for fused elementwise bodies (issue 20): the body's equations of
// a block compiled with Xbyak into one loop over SIMD vectors, every value in a
// register, instead of one flat kernel call per equation over L1 temporaries.
//
// Ops with exact results get instructions of their own (whatever instructions
// compute them, the bits equal the flat kernels'): on f32 add, subtract,
// multiply, divide, sqrt, rsqrt as sqrt then divide, NaN-propagating
// maximum/minimum/relu, neg, abs and comparisons; logical ops on bool; where;
// the alias ops; i32/u32 wrapping add, subtract, multiply and bitwise ops,
// signed i32 comparisons; astype f32 <-> i32, bool -> f32/i32, f32/i32 ->
// bool, i32 <-> u32. The other elementwise ops on 4-byte or bool lanes whose
// flat kernel is one of the level's SIMD kernels (exp, log, tanh, sigmoid,
// log1p, expm1; u32 and bool comparisons, the other astypes) call that kernel's
// code on one vector, so their bits are the unfused ones by construction. A body
// with any other op is not compiled. AVX-512 (x86-64-v4) and AVX2 (x86-64-v3)
// only. Internal to the CPU backend (fused.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kiln/dsl/program.hpp"

namespace kiln::cpu {

// One block: `operands[k]` is leaf k's run of n elements (or its one element
// when broadcast), `outputs[j]` output j's run. Bool values are 0/1 bytes.
using JitFn = void (*)(const void* const* operands, void* const* outputs, std::size_t n);

struct JitBody {
  std::shared_ptr<const void> code;  // owns the generated code
  JitFn fn = nullptr;
  std::vector<ValueId> operands;  // the leaves, in the order `fn` takes them
};

// Leaf kinds for jit_compile, per body value.
enum class JitLeaf : std::uint8_t { kNone, kRun, kBroadcast };

// Compiles body equations `eqs` (in order) storing `outputs` (values computed by
// those equations) for the active SIMD level. `leaf[v]` says how value v reaches
// the block when the equations read it without computing it. nullptr when the
// body has an op without exact code, the level is below x86-64-v3, the build has
// no Xbyak, KILN_CPU_JIT=0, or the body needs more registers than there are.
std::shared_ptr<const JitBody> jit_compile(const Program& body, const std::vector<std::size_t>& eqs,
                                           const std::vector<ValueId>& outputs,
                                           const std::vector<JitLeaf>& leaf);

// How the generated code computes primitive `p` on operands of dtype `in` (for
// where, the values'; its condition is bool) giving `out`, at the active level:
// with its own instructions, by calling the op's flat kernel, or not at all
// (a body with such an op runs on the flat kernels). The one predicate
// jit_compile uses; tests enumerate the primitives with it.
enum class JitOp : std::uint8_t { kNone, kInline, kCall };
JitOp jit_op(Prim p, DType in, DType out);

// Whether jit_compile may compile anything here: built with Xbyak, active level
// x86-64-v3 or v4, KILN_CPU_JIT not 0 (read on every call: plans read it once).
bool jit_available();
// Bodies compiled so far in this process, and the time generating their code
// took (tests check that the code ran; benchmarks report the cost).
std::size_t jit_bodies_compiled();
double jit_generate_ms_total();

}  // namespace kiln::cpu
