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
#include <vector>

#include "kiln/dsl/params.hpp"
#include "kiln/runtime/array.hpp"

namespace kiln {

// The primitives, in the order of dsl/primitives.inc (the one list of them).
enum class Prim : std::uint8_t {
#define KILN_PRIM(id, name, family, params, traits) id,
#include "kiln/dsl/primitives.inc"
#undef KILN_PRIM
};

inline constexpr std::size_t kNumPrims = 0
#define KILN_PRIM(id, name, family, params, traits) +1
#include "kiln/dsl/primitives.inc"
#undef KILN_PRIM
    ;

enum class PrimFamily : std::uint8_t {
  kUnary, kBinary, kWhere, kAstype, kReduce, kArgReduce, kScan, kSort, kMatmul, kLayout,
  kWindow, kIndex, kCreation, kIdentity, kControl
};

// Properties of a primitive that code outside its kernels asks about (see the
// top of dsl/primitives.inc).
enum class PrimTrait : std::uint32_t {
  kNone = 0,
  kTranscendental = 1u << 0,
  kDifferentiable = 1u << 1,
  kFloatOnly = 1u << 2,
  kIntegerOnly = 1u << 3,
  kComparison = 1u << 4,
  kAlias = 1u << 5,
  kMath = 1u << 6,
  kValueChecked = 1u << 7,
};
constexpr PrimTrait operator|(PrimTrait a, PrimTrait b) {
  return static_cast<PrimTrait>(static_cast<std::uint32_t>(a) | static_cast<std::uint32_t>(b));
}

struct PrimInfo {
  Prim prim;
  std::string_view name;  // "add", "sum", ...
  PrimFamily family;
  std::uint32_t traits;   // PrimTrait bits
  std::size_t params;     // index in ParamsVariant of the struct it takes
};

namespace detail {
inline constexpr PrimInfo kPrimTable[] = {
#define KILN_PRIM(id, name, family, params, traits)        \
  {Prim::id, name, PrimFamily::family, [] {                  \
     using enum PrimTrait;                                   \
     return static_cast<std::uint32_t>(traits);              \
   }(), VariantIndex<params, ParamsVariant>::value},
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

// How many primitives family f has (a backend whose family handler is a
// single kernel asserts that it is 1).
constexpr std::size_t prims_in(PrimFamily f) {
  std::size_t n = 0;
  for (const PrimInfo& i : detail::kPrimTable) n += i.family == f ? 1 : 0;
  return n;
}

// The parameter struct primitive P takes (its row's third column).
template <Prim P>
using ParamsOf = std::variant_alternative_t<info(P).params, ParamsVariant>;

// ---- compile-time dispatch ----
// A primitive as a type: code that handles primitives is written once as a
// generic lambda over PrimC<P> and instantiated for every row, so a row
// without a case is a compile error (the chain of `if constexpr (P == ...)`
// ends in `static_assert(kUnhandled<P>, ...)`), never a run-time default.
template <Prim P>
using PrimC = std::integral_constant<Prim, P>;
template <Prim P>
inline constexpr bool kUnhandled = false;

namespace detail {
[[noreturn]] void not_in_family(Prim p, PrimFamily f);
[[noreturn]] void not_a_prim(Prim p);
}  // namespace detail

// Calls f(PrimC<P>{}) for the P equal to p; f is instantiated for every
// primitive of family F (F's handler must cover all of them) and p must be one.
template <PrimFamily F, class Fn>
decltype(auto) visit_family(Prim p, Fn&& f) {
  switch (p) {
#define KILN_PRIM(id, name, fam, params, traits)            \
  case Prim::id:                                            \
    if constexpr (PrimFamily::fam == F) return f(PrimC<Prim::id>{}); \
    break;
#include "kiln/dsl/primitives.inc"
#undef KILN_PRIM
  }
  detail::not_in_family(p, F);
}

// Calls f(PrimC<P>{}) for the P equal to p; f is instantiated for every primitive.
template <class Fn>
decltype(auto) visit_prim(Prim p, Fn&& f) {
  switch (p) {
#define KILN_PRIM(id, name, fam, params, traits) \
  case Prim::id:                                 \
    return f(PrimC<Prim::id>{});
#include "kiln/dsl/primitives.inc"
#undef KILN_PRIM
  }
  detail::not_a_prim(p);
}

namespace detail {
// Binds `p` to `inputs` producing an array with aval `out`. Inside a trace the
// binding is recorded (dsl/trace.hpp); otherwise it runs now on the inputs'
// device (all inputs must share one device). `params` must hold the struct of
// p's row (an internal Error otherwise; bind<P> checks it at compile time).
Array bind(Prim p, const Params& params, std::span<const Array> inputs,
           Aval out);
template <Prim P>
Array bind(ParamsOf<P> params, std::span<const Array> inputs, Aval out) {
  return bind(P, Params(std::move(params)), inputs, std::move(out));
}
// Binds a control-flow primitive (family kControl: several results, bodies in
// its parameters; dsl/control.hpp): recorded inside a trace, else run now
// (the bodies evaluated eagerly, op by op).
std::vector<Array> bind_multi(Prim p, const Params& params, std::span<const Array> inputs,
                              std::span<const Aval> outs);
// What every binding checks of its inputs: none donated, and (when not
// `tracing`) none a tracer: an escaped tracer is an error, not a crash.
void check_bind_inputs(Prim p, std::span<const Array> inputs, bool tracing);
// The one device of an eager binding's inputs (DeviceError when they differ),
// or `otherwise` without inputs.
Device eager_device(Prim p, std::span<const Array> inputs, Device otherwise);
}  // namespace detail

}  // namespace kiln
