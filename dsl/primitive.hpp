// Primitives: the closed set of operations every backend implements. The public DSL
// (dsl/ops.hpp) validates arguments, computes the output Aval (the shape and dtype
// rule) and binds a primitive; tracing and autodiff will record the same bindings.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>

#include "kiln/runtime/aggregate.hpp"
#include "kiln/runtime/array.hpp"

namespace kiln {

// The primitives, in the order of dsl/primitives.inc (the one list of them).
enum class Prim : std::uint8_t {
#define KILN_PRIM(id, name, family, traits) id,
#include "kiln/dsl/primitives.inc"
#undef KILN_PRIM
};

inline constexpr std::size_t kNumPrims = 0
#define KILN_PRIM(id, name, family, traits) +1
#include "kiln/dsl/primitives.inc"
#undef KILN_PRIM
    ;

enum class PrimFamily : std::uint8_t {
  kUnary, kBinary, kWhere, kAstype, kReduce, kArgReduce, kScan, kSort, kMatmul, kLayout,
  kIndex, kCreation, kIdentity
};

// Properties of a primitive that code outside its kernels asks about (see the
// top of dsl/primitives.inc).
enum class PrimTrait : std::uint32_t {
  kTranscendental = 1u << 0,
  kDifferentiable = 1u << 1,
  kFloatOnly = 1u << 2,
  kIntegerOnly = 1u << 3,
  kComparison = 1u << 4,
  kAlias = 1u << 5,
  kMath = 1u << 6,
};
constexpr PrimTrait operator|(PrimTrait a, PrimTrait b) {
  return static_cast<PrimTrait>(static_cast<std::uint32_t>(a) | static_cast<std::uint32_t>(b));
}

struct PrimInfo {
  Prim prim;
  std::string_view name;  // "add", "sum", ...
  PrimFamily family;
  std::uint32_t traits;   // PrimTrait bits
};

namespace detail {
inline constexpr PrimInfo kPrimTable[] = {
#define KILN_PRIM(id, name, family, traits)         \
  {Prim::id, name, PrimFamily::family, [] {             \
     using enum PrimTrait;                              \
     return static_cast<std::uint32_t>(traits);         \
   }()},
#include "kiln/dsl/primitives.inc"
#undef KILN_PRIM
};
static_assert(std::size(kPrimTable) == kNumPrims);
}  // namespace detail

constexpr const PrimInfo& info(Prim p) { return detail::kPrimTable[static_cast<std::size_t>(p)]; }
constexpr PrimFamily family(Prim p) { return info(p).family; }
constexpr std::string_view name(Prim p) { return info(p).name; }
constexpr bool has_trait(Prim p, PrimTrait t) {
  return (info(p).traits & static_cast<std::uint32_t>(t)) != 0;
}
// Every primitive, in table order.
constexpr std::span<const PrimInfo> all_prims() { return detail::kPrimTable; }

// Static parameters of a primitive binding. Unused fields keep their defaults, so
// two bindings are equal exactly when their parameters are.
struct Params {
  Axes axes;     // reductions: axes; transpose: permutation
  Shape shape;   // reshape/broadcast_to/full/arange: result shape
  Shape starts;  // slice: per-axis start (normalised, >= 0)
  Shape steps;   // slice: per-axis step (> 0); result extents are in `shape`
  std::int64_t axis = 0;   // concatenate, take(_along_axis), scatters, argmax, one_hot, scans
  std::int64_t depth = 0;  // one_hot
  bool keepdims = false;
  bool reverse = false;    // cumsum/cumprod: from the end; argsort: descending
  DType dtype = DType::kF32;  // astype/bitcast target, creation dtype
  double value = 0.0;         // full: fill value; arange: start
  double step = 1.0;          // arange: step
  Device device;              // creation ops: where to create
  // matmul: an operand is stored transposed in its last two axes. Set only by
  // the compiler's layout pass (dsl/program.cpp), never by the public op, so
  // autodiff never sees it.
  bool transpose_a = false;
  bool transpose_b = false;

  // Over every field (for_each_field: a new field joins without edits), floats
  // by bits: the one definition of "the same parameters" that CSE and the
  // kernel caches key on. -0.0 and 0.0 differ (a fill of -0.0 divides to
  // -inf); a NaN equals the same NaN.
  friend bool operator==(const Params& a, const Params& b);
  template <class H>
  friend H AbslHashValue(H h, const Params& p);
};

namespace detail {
template <class T>
auto param_key(const T& v) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::bit_cast<std::uint64_t>(static_cast<double>(v));
  } else if constexpr (std::is_same_v<T, Device>) {
    return std::pair{static_cast<int>(v.kind), v.index};
  } else {
    return v;
  }
}
}  // namespace detail

inline bool operator==(const Params& a, const Params& b) {
  constexpr std::size_t n = detail::kFieldCount<Params>;
  return detail::with_fields<n>(a, [&](auto, const auto&... fa) {
    return detail::with_fields<n>(b, [&](auto, const auto&... fb) {
      return ((detail::param_key(fa) == detail::param_key(fb)) && ...);
    });
  });
}
template <class H>
H AbslHashValue(H h, const Params& p) {
  detail::for_each_field(p, [&](const auto& f) { h = H::combine(std::move(h), detail::param_key(f)); });
  return h;
}

namespace detail {
// Binds `p` to `inputs` producing an array with aval `out`. Inside a trace the
// binding is recorded (dsl/trace.hpp); otherwise it runs now on the inputs'
// device (all inputs must share one device).
Array bind(Prim p, const Params& params, std::span<const Array> inputs,
           Aval out);
}  // namespace detail

}  // namespace kiln
