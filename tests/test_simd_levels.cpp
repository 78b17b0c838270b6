// Every SIMD level's elementwise kernels (backends/cpu/simd_kernels.cpp) against
// the portable reference kernels (elementwise.cpp), on special values: NaN of
// both signs, infinities, signed zeros, subnormals, the extremes, ties, integer
// overflow and division edges. The primitives and dtypes are enumerated from the
// table (all_prims()) and from what each level's table answers, so a new
// primitive, dtype or level cannot skip it. Each binary case is every pair of
// specials, with a length that is no multiple of a vector (tails), and each
// special as a broadcast scalar on either side.
//
// Exact primitives must match bit for bit (any NaN equals any NaN; -0 and +0
// differ). Transcendental ones (kTranscendental: xsimd's polynomials vs the C
// library) may differ by a few ulps, but never in NaN-ness, infinity or sign.
// The levels run in one process: the test calls each level's table directly.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <kiln/kiln.hpp>
#include <limits>
#include <string>
#include <vector>

#include "kiln/backends/cpu/elementwise.hpp"
#include "kiln/backends/cpu/simd.hpp"
#include "kiln/dsl/primitive.hpp"

using namespace kiln;
using namespace kiln::cpu;

namespace {

struct Level {
  const char* name;
  FlatKernel (*kernel)(Prim, DType, DType);
};

std::vector<Level> levels() {
  std::vector<Level> out{{"generic", &isa_generic::kernel}};
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("x86-64-v2")) out.push_back({"x86-64-v2", &isa_x86_v2::kernel});
  if (__builtin_cpu_supports("x86-64-v3")) out.push_back({"x86-64-v3", &isa_x86_v3::kernel});
  if (__builtin_cpu_supports("x86-64-v4")) out.push_back({"x86-64-v4", &isa_x86_v4::kernel});
#endif
  return out;
}

template <class T>
std::vector<T> specials() {
  using L = std::numeric_limits<T>;
  if constexpr (std::is_floating_point_v<T>) {
    return {L::quiet_NaN(), -L::quiet_NaN(), L::infinity(), -L::infinity(), T(0), -T(0), T(1),
            T(-1), T(0.5), T(-0.5), T(2.5), T(-2.5), L::denorm_min(), -L::denorm_min(),
            L::min(), -L::min(), L::max(), -L::max(), T(88.75), T(-87.5), T(710), T(100),
            T(-100), L::epsilon(), T(1) - L::epsilon(), T(3.14159265358979), T(-1e-3)};
  } else if constexpr (std::is_same_v<T, std::uint8_t>) {  // bool bytes
    return {0, 1};
  } else {
    return {L::min(), static_cast<T>(L::min() + 1), static_cast<T>(-100), static_cast<T>(-7),
            static_cast<T>(-1), 0, 1, 7, 31, 32, 33, 100, static_cast<T>(L::max() - 1), L::max()};
  }
}

template <class F>
decltype(auto) with_dtype(DType d, F&& f) {
  switch (d) {
    case DType::kF32: return f(float{});
    case DType::kF64: return f(double{});
    case DType::kI32: return f(std::int32_t{});
    case DType::kU32: return f(std::uint32_t{});
    default: return f(std::uint8_t{});
  }
}

const DType kHostTypes[] = {DType::kF32, DType::kF64, DType::kI32, DType::kU32, DType::kBool};

template <class T>
std::string text(T x) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(x)) return std::signbit(x) ? "-nan" : "nan";
    if (x == 0) return std::signbit(x) ? "-0" : "0";
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(x));
  return buf;
}

// "" when `got` matches `want`, else a description of the first difference.
template <class T>
std::string compare(const std::vector<T>& want, const std::vector<T>& got, bool ulps,
                    const std::vector<std::string>& where) {
  for (std::size_t i = 0; i < want.size(); ++i) {
    const T w = want[i], g = got[i];
    bool ok;
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(w) || std::isnan(g)) {
        ok = std::isnan(w) && std::isnan(g);
      } else if (ulps && std::isfinite(w) && std::isfinite(g) && std::signbit(w) == std::signbit(g)) {
        using U = std::conditional_t<sizeof(T) == 4, std::int32_t, std::int64_t>;
        const auto d = std::bit_cast<U>(w) - std::bit_cast<U>(g);
        ok = (d < 0 ? -d : d) <= 4;
      } else {
        ok = std::memcmp(&w, &g, sizeof(T)) == 0;
      }
    } else {
      ok = w == g;
    }
    if (!ok) {
      return where[i] + ": reference " + text(w) + ", level " + text(g);
    }
  }
  return "";
}

}  // namespace

TEST_CASE("every SIMD level's elementwise kernels match the reference kernels on special values") {
  const std::vector<Level> ls = levels();
  int compared = 0;
  for (const PrimInfo& info : all_prims()) {
    const Prim p = info.prim;
    const PrimFamily fam = family(p);
    if (fam != PrimFamily::kUnary && fam != PrimFamily::kBinary && fam != PrimFamily::kAstype) {
      continue;
    }
    if (has_trait(p, PrimTrait::kAlias)) continue;  // bitcast moves bytes, no kernel
    const bool ulps = has_trait(p, PrimTrait::kTranscendental);
    for (DType in : kHostTypes) {
      const std::vector<DType> outs =
          fam == PrimFamily::kAstype ? std::vector<DType>(std::begin(kHostTypes), std::end(kHostTypes))
          : has_trait(p, PrimTrait::kComparison) ? std::vector<DType>{DType::kBool}
                                                  : std::vector<DType>{in};
      for (DType out : outs) {
        FlatKernel ref = nullptr;
        try {
          ref = reference_kernel(p, in, out);
        } catch (const Error&) {
          continue;  // no kernel for this dtype: the op refuses it before any kernel
        }
        with_dtype(in, [&](auto tin) {
          using TI = decltype(tin);
          with_dtype(out, [&](auto tout) {
            using TO = decltype(tout);
            const std::vector<TI> s = specials<TI>();
            // Operand layouts: unary over the specials; binary over every pair,
            // and each special broadcast on the left, then on the right.
            std::vector<TI> a, b;
            std::vector<std::string> where;
            const bool binary = fam == PrimFamily::kBinary;
            if (!binary) {
              a = s;
              for (TI x : s) where.push_back(std::string(info.name) + "(" + text(x) + ")");
            } else {
              for (TI x : s) {
                for (TI y : s) {
                  a.push_back(x);
                  b.push_back(y);
                  where.push_back(std::string(info.name) + "(" + text(x) + ", " + text(y) + ")");
                }
              }
            }
            const std::size_t n = a.size();
            std::vector<TO> want(n), got(n);
            const auto run = [&](FlatKernel k, std::vector<TO>& dst, int scalar_side, TI scalar) {
              FlatOperand ops[2] = {{a.data(), false}, {b.data(), false}};
              if (scalar_side >= 0) ops[scalar_side] = {&scalar, true};
              k(ops, dst.data(), n);
            };
            for (const Level& l : ls) {
              CAPTURE(l.name);
              CAPTURE(name(in));
              CAPTURE(name(out));
              const FlatKernel k = l.kernel(p, in, out);
              if (k == nullptr) continue;  // this level defers to the reference
              run(ref, want, -1, TI{});
              run(k, got, -1, TI{});
              const std::string diff = compare(want, got, ulps, where);
              CHECK_MESSAGE(diff.empty(), (std::string(l.name) + " " + diff));
              ++compared;
              if (!binary) continue;
              for (int side : {0, 1}) {
                for (TI x : s) {
                  run(ref, want, side, x);
                  run(k, got, side, x);
                  std::vector<std::string> w2(n);
                  for (std::size_t i = 0; i < n; ++i) {
                    w2[i] = std::string(info.name) + "(" + text(side == 0 ? x : a[i]) + ", " +
                            text(side == 1 ? x : b[i]) + ")";
                  }
                  const std::string d2 = compare(want, got, ulps, w2);
                  CHECK_MESSAGE(d2.empty(), (std::string(l.name) + " scalar operand " + std::to_string(side) + ": " + d2));
                }
              }
            }
          });
        });
      }
    }
  }
  // Each level has SIMD kernels for (at least) the float arithmetic of f32
  // and f64, so a table that stopped answering would show here.
  CHECK(compared >= static_cast<int>(ls.size()) * 20);
}
