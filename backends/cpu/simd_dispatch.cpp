// Picks the SIMD level of simd.hpp once per process: KILN_CPU_ISA, else the
// highest level the CPU reports (CPUID through GCC's __builtin_cpu_supports) among
// those this build compiled.
#include <cstdlib>
#include <string_view>

#include "kiln/backends/cpu/simd.hpp"
#include "kiln/runtime/env.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::cpu {
namespace {

#if defined(__x86_64__)
constexpr bool kX86 = true;
#else
constexpr bool kX86 = false;
#endif

bool cpu_has(Isa isa) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  switch (isa) {
    case Isa::kGeneric: return true;
    case Isa::kX86V2: return __builtin_cpu_supports("x86-64-v2");
    case Isa::kX86V3: return __builtin_cpu_supports("x86-64-v3");
    case Isa::kX86V4: return __builtin_cpu_supports("x86-64-v4");
  }
  return false;
#else
  return isa == Isa::kGeneric;
#endif
}

Isa pick() {
  if (const std::optional<std::string> env = detail::env::choice("KILN_CPU_ISA")) {
    const std::string_view want(*env);
    for (Isa isa : {Isa::kGeneric, Isa::kX86V2, Isa::kX86V3, Isa::kX86V4}) {
      if (want != isa_name(isa)) continue;
      if (!cpu_has(isa) || (isa != Isa::kGeneric && !kX86)) {
        throw Error(detail::str_cat("KILN_CPU_ISA=", want,
                                    ": this CPU does not support that level (it has ",
                                    isa_name(kX86 && cpu_has(Isa::kX86V4)   ? Isa::kX86V4
                                             : kX86 && cpu_has(Isa::kX86V3) ? Isa::kX86V3
                                             : kX86 && cpu_has(Isa::kX86V2) ? Isa::kX86V2
                                                                            : Isa::kGeneric),
                                    ")"));
      }
      return isa;
    }
    throw Error(detail::str_cat("KILN_CPU_ISA=", want,
                                ": expected generic, x86-64-v2, x86-64-v3 or x86-64-v4"));
  }
  if (!kX86) return Isa::kGeneric;
  for (Isa isa : {Isa::kX86V4, Isa::kX86V3, Isa::kX86V2}) {
    if (cpu_has(isa)) return isa;
  }
  return Isa::kGeneric;
}

using Table = FlatKernel (*)(Prim, DType, DType);
using VectorTable = const void* (*)(Prim, DType, DType);

Table table(Isa isa) {
  switch (isa) {
    case Isa::kGeneric: return isa_generic::kernel;
#if defined(__x86_64__)
    case Isa::kX86V2: return isa_x86_v2::kernel;
    case Isa::kX86V3: return isa_x86_v3::kernel;
    case Isa::kX86V4: return isa_x86_v4::kernel;
#else
    default: break;
#endif
  }
  return isa_generic::kernel;
}

VectorTable vector_table(Isa isa) {
  switch (isa) {
    case Isa::kGeneric: return isa_generic::vector_kernel;
#if defined(__x86_64__)
    case Isa::kX86V2: return isa_x86_v2::vector_kernel;
    case Isa::kX86V3: return isa_x86_v3::vector_kernel;
    case Isa::kX86V4: return isa_x86_v4::vector_kernel;
#else
    default: break;
#endif
  }
  return isa_generic::vector_kernel;
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kGeneric: return "generic";
    case Isa::kX86V2: return "x86-64-v2";
    case Isa::kX86V3: return "x86-64-v3";
    case Isa::kX86V4: return "x86-64-v4";
  }
  return "?";
}

Isa active_isa() {
  static const Isa isa = pick();
  return isa;
}

FlatKernel simd_kernel(Prim p, DType in, DType out) {
  static const Table t = table(active_isa());
  return t(p, in, out);
}

const void* simd_vector_kernel(Prim p, DType in, DType out) {
  static const VectorTable t = vector_table(active_isa());
  return t(p, in, out);
}

}  // namespace kiln::cpu
