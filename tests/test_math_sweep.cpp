// The math sweep (issue 36): every float primitive of the unary and binary
// families (enumerated from dsl/primitives.inc; a new row without a reference
// here is a compile error) over f32's whole range, eagerly and compiled, on the
// device under test (KILN_DEVICE; the CPU at every SIMD level through
// KILN_CPU_ISA, tests/meson.build), against the f64 C library:
//   - within the op's bound in ulp of the f64 value (kMaxUlp, 4, unless
//     bound() below says why not), on every finite input sampled;
//   - special values exact: NaN for NaN, infinities, zeros with their sign.
// Inputs: every 2^14-th f32 bit pattern (random low bits; all exponents, both
// signs, subnormals, infinities and NaNs), each bound()'s edges and their
// neighbours (overflow edges, branch points of kiln's own math in
// dsl/f32_math.hpp, multiples of pi/2); binary ops take random pairs and pairs
// shaped for the op (pow: results in f32's range).
// Subnormals: the CPU keeps them (and is held to them); a Vulkan driver may
// flush them (docs/DTYPES.md), so there a subnormal input may act as zero and a
// subnormal result may be zero.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <kiln/kiln.hpp>
#include <limits>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "kiln/dsl/primitive.hpp"
#include "kiln/dsl/unary_math.hpp"

using namespace kiln;

namespace {

constexpr double kMaxUlp = 4.0;
constexpr float kInf = std::numeric_limits<float>::infinity();

// What the sweep knows of a primitive: its f64 reference, or that it is not a
// float op (integers, booleans, comparisons). Every unary and binary row must
// be here: the static_assert names the one that is not.
struct Ref {
  bool float_op = false;
  double (*unary)(double) = nullptr;
  double (*binary)(double, double) = nullptr;
  double bound = kMaxUlp;  // ulp
  const char* why = "";    // where bound != kMaxUlp
};

template <Prim P>
Ref reference() {
  Ref r;
  r.float_op = true;
  if constexpr (has_trait(P, PrimTrait::kMath) && family(P) == PrimFamily::kUnary) {
    r.unary = &MathDef<P>::reference;
    if constexpr (P == Prim::kErfinv) {
      r.bound = 32;
      r.why = "XLA's ErfInv32 polynomial step for step (jax.lax.erf_inv's bits, random::normal's)";
    }
  } else if constexpr (has_trait(P, PrimTrait::kMath)) {
    r.binary = &MathDef<P>::reference;
  } else if constexpr (P == Prim::kNeg) {
    r.unary = [](double x) { return -x; };
  } else if constexpr (P == Prim::kAbs) {
    r.unary = [](double x) { return std::fabs(x); };
  } else if constexpr (P == Prim::kExp) {
    r.unary = [](double x) { return std::exp(x); };
  } else if constexpr (P == Prim::kLog) {
    r.unary = [](double x) { return std::log(x); };
  } else if constexpr (P == Prim::kTanh) {
    r.unary = [](double x) { return std::tanh(x); };
  } else if constexpr (P == Prim::kSqrt) {
    r.unary = [](double x) { return std::sqrt(x); };
  } else if constexpr (P == Prim::kRsqrt) {
    r.unary = [](double x) { return 1.0 / std::sqrt(x); };
  } else if constexpr (P == Prim::kSigmoid) {
    r.unary = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
  } else if constexpr (P == Prim::kRelu) {
    r.unary = [](double x) { return std::isnan(x) ? x : x > 0 ? x : 0.0; };
  } else if constexpr (P == Prim::kAdd) {
    r.binary = [](double a, double b) { return a + b; };
  } else if constexpr (P == Prim::kSub) {
    r.binary = [](double a, double b) { return a - b; };
  } else if constexpr (P == Prim::kMul) {
    r.binary = [](double a, double b) { return a * b; };
  } else if constexpr (P == Prim::kDiv) {
    r.binary = [](double a, double b) { return a / b; };
  } else if constexpr (P == Prim::kPow) {
    r.binary = [](double a, double b) { return std::pow(a, b); };
  } else if constexpr (P == Prim::kMaximum || P == Prim::kMinimum) {
    r.binary = [](double a, double b) {
      if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
      return P == Prim::kMaximum ? (a > b ? a : b) : (a < b ? a : b);
    };
  } else if constexpr (has_trait(P, PrimTrait::kComparison) || P == Prim::kLogicalNot ||
                       P == Prim::kLogicalAnd || P == Prim::kLogicalOr ||
                       P == Prim::kBitwiseNot || P == Prim::kBitwiseAnd ||
                       P == Prim::kBitwiseOr || P == Prim::kBitwiseXor ||
                       P == Prim::kShiftLeft || P == Prim::kShiftRightLogical) {
    r.float_op = false;  // integers and booleans: exact, tested in test_ops_bitwise.cpp
  } else {
    static_assert(kUnhandled<P>, "a unary or binary primitive the math sweep has no reference for");
  }
  return r;
}

float from_bits(std::uint32_t b) { return std::bit_cast<float>(b); }

double ulp_at(double r) {  // of f32, at |r| (subnormal spacing below 2^-126)
  const double a = std::fabs(r);
  if (a < 0x1p-126) return 0x1p-149;
  int e = 0;
  std::frexp(a, &e);
  return std::ldexp(1.0, e - 24);
}

constexpr double kMaxFinite = 3.4028234663852886e38;

// The error of `got` for reference `want`, in ulp; special values exact
// (returns infinity when the kind is wrong).
double ulp_error(float got, double want) {
  const double big = std::numeric_limits<double>::infinity();
  if (std::isnan(want)) return std::isnan(got) ? 0.0 : big;
  if (std::isnan(got)) return big;
  // Past f32's range the result is infinity; an infinity within a few ulp of
  // the edge, or the largest float past it, are that many ulp off.
  const double top = kMaxFinite + ulp_at(kMaxFinite) / 2;
  if (std::isinf(got)) {
    if (std::signbit(got) != std::signbit(want)) return big;
    return std::fabs(want) >= top ? 0.0 : (top - std::fabs(want)) / ulp_at(kMaxFinite);
  }
  if (std::fabs(want) >= top) return (std::fabs(want) - std::fabs(got)) / ulp_at(kMaxFinite);
  if (want == 0.0) return got == 0.0f && std::signbit(got) == std::signbit(want) ? 0.0 : big;
  return std::fabs(static_cast<double>(got) - want) / ulp_at(want);
}

bool subnormal(double v) { return v != 0.0 && std::fabs(v) < 0x1p-126; }

// Inputs for unary ops: the strided bit patterns, then edges and neighbours.
std::vector<float> unary_inputs() {
  std::vector<float> xs;
  std::mt19937 g(36);
  constexpr std::uint64_t kStride = 1u << 14;
  for (std::uint64_t b = 0; b < (std::uint64_t{1} << 32); b += kStride) {
    xs.push_back(from_bits(static_cast<std::uint32_t>(b + g() % kStride)));
  }
  const float pi2 = std::numbers::pi_v<float> / 2;
  std::vector<float> edges = {
      0.0f, 1.0f, 0.5f, 2.0f, 0x1p-126f, 0x1p-149f, 0x1p-127f, std::numeric_limits<float>::max(),
      kInf, 88.72283f, 88.0f, 89.41599f, 103.97208f, 87.33655f, 126.0f, 128.0f, 149.0f, 150.0f,
      0.69314718f, 0.34657359f, 0.41421356f, 0.29289322f, 2.4142135f, 0.55f, 0.70710678f,
      1.41421356f, 0.78539816f, 9.01f, 15.0f, 44.0f, 1e-4f, 1e-8f, 1e-30f, 1e10f,
      4.0f, 8192.0f, 1e30f, 3.0f * pi2, 4.0f * pi2, 7.0f * pi2, 100.0f * pi2, 0x1.921fb6p+24f,
      16367173.0f * 0x1p72f, 0.99999994f};
  for (const float e : edges) {
    float up = e, down = e;
    for (int i = 0; i < 24; ++i) {
      for (const float v : {up, down}) {
        xs.push_back(v);
        xs.push_back(-v);
      }
      up = std::nextafter(up, kInf);
      down = std::nextafter(down, -kInf);
    }
  }
  xs.push_back(std::numeric_limits<float>::quiet_NaN());
  return xs;
}

// Pairs for binary ops: random bit patterns, pairs of moderate values, and for
// pow pairs whose result is in range (y log2 x up to +-160) and integer
// exponents of negative bases; plus IEEE's special pairs.
std::pair<std::vector<float>, std::vector<float>> binary_inputs() {
  std::vector<float> as, bs;
  std::mt19937 g(37);
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  for (int i = 0; i < (1 << 16); ++i) {
    as.push_back(from_bits(static_cast<std::uint32_t>(g())));
    bs.push_back(from_bits(static_cast<std::uint32_t>(g())));
  }
  for (int i = 0; i < (1 << 16); ++i) {  // pow-shaped: x = 2^(+-e) m, y with |y log2 x| <= 160
    const double lx = unit(g) * 126.0;
    const float x = static_cast<float>(std::exp2(lx) * (1.0 + 0.999 * std::fabs(unit(g))));
    const double limit = 160.0 / std::max(std::fabs(std::log2(static_cast<double>(x))), 1e-3);
    as.push_back(x);
    bs.push_back(static_cast<float>(unit(g) * std::min(limit, 1e6)));
  }
  for (int i = 0; i < 4096; ++i) {
    as.push_back(static_cast<float>(-std::exp2(unit(g) * 8)));
    bs.push_back(static_cast<float>(std::round(unit(g) * 40)));
  }
  for (int i = 0; i < 4096; ++i) {  // near 1, large exponents: pow's hardest
    as.push_back(1.0f + static_cast<float>(unit(g)) * 0x1p-10f);
    bs.push_back(static_cast<float>(unit(g) * 1e5));
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float specials[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, -0.5f, 2.0f, -2.0f, 3.0f, -3.0f,
                            kInf, -kInf, nan, 0x1p-149f, 1e30f};
  for (const float a : specials) {
    for (const float b : specials) {
      as.push_back(a);
      bs.push_back(b);
    }
  }
  return {as, bs};
}

struct Worst {
  double ulp = 0;
  float a = 0, b = 0, got = 0;
  double want = 0;
  std::size_t over = 0;  // past the bound
};

template <class Want>
Worst measure(const std::vector<float>& got, std::size_t n, const Want& want_at, bool device_flushes,
              double bound, const std::vector<float>& as, const std::vector<float>* bs) {
  Worst w;
  for (std::size_t i = 0; i < n; ++i) {
    const double want = want_at(i, false);
    double e = ulp_error(got[i], want);
    if (e > bound && device_flushes) {
      // The driver's subnormals: inputs as zeros, subnormal results as zeros.
      if (subnormal(want) && got[i] == 0.0f) e = 0.0;
      const bool sub_in = subnormal(as[i]) || (bs != nullptr && subnormal((*bs)[i]));
      if (sub_in) e = std::min(e, ulp_error(got[i], want_at(i, true)));
    }
    if (e > bound) ++w.over;
    if (e > w.ulp) w = {e, as[i], bs != nullptr ? (*bs)[i] : 0.0f, got[i], want, w.over};
  }
  return w;
}

float flushed(float v) { return std::fabs(v) < 0x1p-126f ? std::copysign(0.0f, v) : v; }

template <Prim P>
Array call_unary(const Array& v) {
  const std::vector<Array> in{v};
  return detail::bind(P, Params{}, in, v.aval());
}

}  // namespace

TEST_CASE("every primitive of float math: within its ulp bound of f64 over f32's whole range, eagerly and compiled") {
  const bool flushes = default_device() != Device::cpu();
  const std::vector<float> xs = unary_inputs();
  const auto [as, bs] = binary_inputs();
  const Array x = array(xs, Shape{static_cast<std::int64_t>(xs.size())});
  const Array a = array(as, Shape{static_cast<std::int64_t>(as.size())});
  const Array b = array(bs, Shape{static_cast<std::int64_t>(bs.size())});
  std::size_t swept = 0;
  std::string table;
  const auto unary = [&]<Prim P>(PrimC<P>) {
    const Ref ref = reference<P>();
    if (!ref.float_op) return;
    CAPTURE(name(P));
    const auto call = [](const Array& v) {
      const std::vector<Array> in{v};
      return detail::bind(P, Params{}, in, v.aval());
    };
    const auto jitted = filter_jit([&](const Array& v) { return call(v) * 1.0f; });
    const auto want_at = [&](std::size_t i, bool flush) {
      return ref.unary(static_cast<double>(flush ? flushed(xs[i]) : xs[i]));
    };
    for (const bool compiled : {false, true}) {
      CAPTURE(compiled);
      const Array out = compiled ? jitted(x) : call(x);
      const std::vector<float> got = out.to_vector<float>();
      const Worst w = measure(got, xs.size(), want_at, flushes, ref.bound, xs, nullptr);
      CAPTURE(w.a);
      CAPTURE(w.got);
      CAPTURE(w.want);
      CHECK(w.over == 0);
      if (!compiled) {
        char line[200];
        std::snprintf(line, sizeof line, "%-8s %9.3f ulp  (at %a)\n", name(P).data(), w.ulp, w.a);
        table += line;
      }
    }
    ++swept;
  };
  const auto binary = [&]<Prim P>(PrimC<P>) {
    const Ref ref = reference<P>();
    if (!ref.float_op) return;
    CAPTURE(name(P));
    const auto call = [](const Array& u, const Array& v) {
      const std::vector<Array> in{u, v};
      return detail::bind(P, Params{}, in, u.aval());
    };
    const auto want_at = [&](std::size_t i, bool flush) {
      return ref.binary(static_cast<double>(flush ? flushed(as[i]) : as[i]),
                        static_cast<double>(flush ? flushed(bs[i]) : bs[i]));
    };
    const Array out = call(a, b);
    const std::vector<float> got = out.to_vector<float>();
    const Worst w = measure(got, as.size(), want_at, flushes, ref.bound, as, &bs);
    CAPTURE(w.a);
    CAPTURE(w.b);
    CAPTURE(w.got);
    CAPTURE(w.want);
    CHECK(w.over == 0);
    char line[200];
    std::snprintf(line, sizeof line, "%-8s %9.3f ulp  (at %a, %a)\n", name(P).data(), w.ulp, w.a, w.b);
    table += line;
    ++swept;
  };
  for (const PrimInfo& i : all_prims()) {
    if (family(i.prim) == PrimFamily::kUnary) visit_family<PrimFamily::kUnary>(i.prim, unary);
    if (family(i.prim) == PrimFamily::kBinary) visit_family<PrimFamily::kBinary>(i.prim, binary);
  }
  MESSAGE("worst error per op on ", default_device().to_string(), ":\n", table);
  CHECK(swept >= 30);  // the table's float rows (today 31)
}

// The definitions themselves (dsl/f32_math.hpp on plain floats, ScalarLanes)
// for every math row with kiln's own f32 function (MathDef<P>::own): within
// the bound over the same inputs, and on an exact device (lavapipe: + - * /
// and sqrt correctly rounded, like the CPU) Vulkan's SPIR-V gives their bits,
// so the lowering is the definition and not an approximation of it (inputs
// and results in the subnormal range aside: the driver's).
TEST_CASE("every primitive with kiln's own f32 math: the definition meets the bound, and lavapipe gives its bits") {  // unary, then binary
  const std::vector<float> xs = unary_inputs();
  const Array x = array(xs, Shape{static_cast<std::int64_t>(xs.size())});
  bool exact_device = default_device() == Device::cpu();
  for (const DeviceInfo& d : devices()) {
    if (d.device == default_device() && d.name.find("llvmpipe") != std::string::npos) exact_device = true;
  }
  std::size_t checked = 0;
  for (const PrimInfo& info : all_prims()) {
    visit_prim(info.prim, [&]<Prim P>(PrimC<P>) {
      if constexpr (has_trait(P, PrimTrait::kMath) && family(P) == PrimFamily::kUnary &&
                    requires { MathDef<P>::own(detail::f32m::ScalarLanes{}, 0.0f); }) {
        CAPTURE(name(P));
        const detail::f32m::ScalarLanes k;
        std::vector<float> want(xs.size());
        for (std::size_t i = 0; i < xs.size(); ++i) want[i] = MathDef<P>::own(k, xs[i]);
        if (default_device() == Device::cpu()) {  // the definition, once
          std::size_t over = 0;
          for (std::size_t i = 0; i < xs.size(); ++i) {
            over += ulp_error(want[i], MathDef<P>::reference(xs[i])) > kMaxUlp ? 1 : 0;
          }
          CHECK(over == 0);
        } else if (exact_device) {
          const std::vector<float> got = call_unary<P>(x).template to_vector<float>();
          std::size_t differ = 0;
          float first = 0;
          for (std::size_t i = 0; i < xs.size(); ++i) {
            if (subnormal(xs[i]) || subnormal(want[i]) || (std::isnan(got[i]) && std::isnan(want[i]))) continue;
            if (std::bit_cast<std::uint32_t>(got[i]) != std::bit_cast<std::uint32_t>(want[i])) {
              if (differ++ == 0) first = xs[i];
            }
          }
          CAPTURE(first);
          CHECK(differ == 0);
        }
        ++checked;
      }
    });
  }
  // The binary rows with their own function (atan2) over the binary pairs.
  const auto [as, bs] = binary_inputs();
  const Array a = array(as, Shape{static_cast<std::int64_t>(as.size())});
  const Array b = array(bs, Shape{static_cast<std::int64_t>(bs.size())});
  for (const PrimInfo& info : all_prims()) {
    visit_prim(info.prim, [&]<Prim P>(PrimC<P>) {
      if constexpr (has_trait(P, PrimTrait::kMath) && family(P) == PrimFamily::kBinary &&
                    requires { MathDef<P>::own(detail::f32m::ScalarLanes{}, 0.0f, 0.0f); }) {
        CAPTURE(name(P));
        const detail::f32m::ScalarLanes k;
        std::vector<float> want(as.size());
        for (std::size_t i = 0; i < as.size(); ++i) want[i] = MathDef<P>::own(k, as[i], bs[i]);
        if (default_device() == Device::cpu()) {
          std::size_t over = 0;
          for (std::size_t i = 0; i < as.size(); ++i) {
            over += ulp_error(want[i], MathDef<P>::reference(as[i], bs[i])) > kMaxUlp ? 1 : 0;
          }
          CHECK(over == 0);
        } else if (exact_device) {
          const std::vector<Array> in{a, b};
          const std::vector<float> got = detail::bind(P, Params{}, in, a.aval()).template to_vector<float>();
          std::size_t differ = 0;
          for (std::size_t i = 0; i < as.size(); ++i) {
            if (subnormal(as[i]) || subnormal(bs[i]) || subnormal(want[i]) ||
                (std::isnan(got[i]) && std::isnan(want[i]))) {
              continue;
            }
            differ += std::bit_cast<std::uint32_t>(got[i]) != std::bit_cast<std::uint32_t>(want[i]) ? 1 : 0;
          }
          CHECK(differ == 0);
        }
        ++checked;
      }
    });
  }
  CHECK(checked >= 14);  // sin ... erf, atan2 today
}
