// The code generator's plan of one fused body (jit_schedule.cpp): which ops it
// computes with its own instructions and which through a call of the flat
// kernel, the leaves, and a register per value. Internal to jit.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/backends/cpu/elementwise.hpp"
#include "kiln/backends/cpu/jit.hpp"

namespace kiln::cpu::jit_detail {

// kAbs is also INT_MAX; kTwo31 is 2^31 as f32.
enum class Const : std::uint8_t { kSign, kAbs, kZero, kOne, kOnes, kTwo31, kCount };
inline constexpr std::uint32_t kConstBits[] = {0x80000000u, 0x7fffffffu, 0u, 0x3f800000u,
                                               0xffffffffu, 0x4f000000u};

// What the loop does, in order, with the registers the linear scan gave.
struct Action {
  enum Kind : std::uint8_t { kLoad, kOp, kStore } kind;
  std::size_t eq = 0;         // kOp: the equation
  int index = 0;              // kLoad: operand number; kStore: output number
  bool boolean = false;       // kLoad/kStore: 0/1 bytes
  int dst = -1;               // kLoad/kOp: the register written
  int src[3] = {-1, -1, -1};  // kOp: operands' registers; kStore: src[0]
  FlatKernel call = nullptr;     // kOp: the flat kernel to call on one vector,
  const void* vector = nullptr;  // or the level's vector function (simd.hpp)
  std::uint32_t live = 0;        // kOp with a call: registers to keep across it
};

struct Schedule {
  std::vector<Action> actions;
  std::vector<ValueId> operands;  // leaves, in pointer order
  std::vector<bool> broadcast;    // per operand
  std::vector<int> pinned;        // per broadcast operand: its register, else -1
  int constant[static_cast<int>(Const::kCount)] = {-1, -1, -1, -1, -1, -1};
  std::vector<bool> out_bool;  // per output
  bool calls = false;          // some op calls a kernel
  int fixed = 0;               // registers [0, fixed): constants, broadcast operands
};

// How `p` on operands of dtypes `in` giving `out` is computed at the active
// level (jit.hpp's jit_op, for one equation's dtypes).
JitOp op_kind(Prim p, const DType* in, std::size_t arity, DType out);

// Plans the loop: leaves, register per value, actions. False when the body is
// not supported or registers run out.
bool schedule(const Program& b, const std::vector<std::size_t>& eqs,
              const std::vector<ValueId>& outputs, const std::vector<JitLeaf>& leaf, int registers,
              Schedule& s);

}  // namespace kiln::cpu::jit_detail
