// The CPU backend's SIMD kernels, chosen at run time for the machine: one binary
// runs SSE4.2 code on any x86-64-v2 CPU and AVX2/FMA or AVX-512 code where the
// CPU has them. simd_kernels.cpp is compiled once per level (each object in a
// namespace of its own, see backends/meson.build); simd_dispatch.cpp picks one
// from CPUID, or from KILN_CPU_ISA, once per process.
//
// These kernels are the definition of the ops they cover on the CPU: the
// unfused kernels (elementwise.cpp) and the fused ones (fused.cpp) both call
// them, so a fused program gives the same bits as its ops run one by one. The
// last partial SIMD batch of a run goes through a padded copy, so every element
// takes the same code whatever its position in a run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kiln/backends/cpu/elementwise.hpp"

namespace kiln::cpu {

enum class Isa : std::uint8_t { kGeneric, kX86V2, kX86V3, kX86V4 };

// The level this process runs: KILN_CPU_ISA (`x86-64-v2`, `x86-64-v3`,
// `x86-64-v4`, or `generic`) if set, else the highest the CPU has and kiln was
// built with. A level the CPU lacks, or an unknown name, throws an Error naming
// the variable.
Isa active_isa();
const char* isa_name(Isa isa);

// The SIMD kernel of `p` from dtype `in` to dtype `out` at the active level, or
// nullptr where there is none (the caller's generic kernel then runs).
FlatKernel simd_kernel(Prim p, DType in, DType out);

// The function computing one vector of unary f32 op `p` at the active level,
// called with the level's vector ABI (SysV: the operand in ymm0/zmm0, the
// result there too; every vector register and k register the callee's), or
// nullptr. x86-64-v3 (8 lanes) and v4 (16 lanes) have them for the ops whose
// SIMD kernel is not exactly rounded (exp, log, tanh, sigmoid, log1p, expm1);
// that kernel
// calls the very same function on each of its batches, so the fused-body code
// generator (jit.hpp) calling it gives the unfused bits by construction.
const void* simd_vector_kernel(Prim p, DType in, DType out);

// One table per compiled level (simd_kernels.cpp).
#define KILN_DECLARE_ISA(ns) \
  namespace ns {             \
  FlatKernel kernel(Prim p, DType in, DType out); \
  const void* vector_kernel(Prim p, DType in, DType out); \
  }
KILN_DECLARE_ISA(isa_generic)
KILN_DECLARE_ISA(isa_x86_v2)
KILN_DECLARE_ISA(isa_x86_v3)
KILN_DECLARE_ISA(isa_x86_v4)
#undef KILN_DECLARE_ISA

}  // namespace kiln::cpu
