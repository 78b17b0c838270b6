// kiln's own f32 transcendentals, written once over a lane type: the Vulkan
// lowering instantiates them on SPIR-V values (backends/vulkan/lanes.hpp), and
// tests/test_math_sweep.cpp on plain floats (ScalarLanes below), where each
// is held to the bound and lavapipe's results to its bits. (The CPU keeps
// xsimd's kernels, held to the same bound by the same sweep.)
//
// Why: Vulkan leaves the precision of GLSL.std.450's transcendentals to the
// driver (sin without range reduction, log1p(1e-8) = 0 on lavapipe, 2^-11
// absolute on [-pi, pi] allowed), so the same program gave different answers on
// different devices. These use only what every device rounds the same way:
// + - * on f32 (correctly rounded; the SPIR-V lanes mark them NoContraction),
// integer and bit operations, and division and square root where the algorithm
// tolerates their error (Vulkan allows 2.5 ulp for OpFDiv; divisions here sit
// in correction terms or in a final quotient, see each function).
//
// Bound (docs/DTYPES.md; tests/test_math_sweep.cpp sweeps f32's whole range
// against f64): within 4 ulp of the correctly rounded result on every finite
// input where the device rounds + - * / exactly (CPU, lavapipe); special values
// exact (signed zeros, infinities, NaN, domain edges); subnormal results kept
// where the device keeps them.
//
// A lane type K provides (ScalarLanes is the reference):
//   F, I, U, M          f32 lanes, i32 lanes, u32 lanes, a mask
//   f(double) i(int) u(unsigned)       constants
//   + - * / and comparisons on F; + - * & | << >> and comparisons on I and U
//   (>> arithmetic on I, logical on U)
//   sel(M, a, b)        per lane: a where the mask is set (F, I or U)
//   both(M, M) either(M, M) negate(M)
//   isnan(F) rint(F) sqrt(F) to_f(I) to_i(F) (in range) bits(F)->U from_bits(U)
//   to_u(I) to_i(U)     bit casts
#pragma once

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <utility>

namespace kiln::detail::f32m {

// Plain floats: the definition's reference instantiation.
struct ScalarLanes {
  using F = float;
  using I = std::int32_t;
  using U = std::uint32_t;
  using M = bool;
  static F f(double v) { return static_cast<float>(v); }
  static I i(std::int32_t v) { return v; }
  static U u(std::uint32_t v) { return v; }
  template <class T>
  static T sel(M c, T a, T b) { return c ? a : b; }
  static M both(M a, M b) { return a && b; }
  static M either(M a, M b) { return a || b; }
  static M negate(M a) { return !a; }
  static M isnan(F x) { return x != x; }
  static F rint(F x) { return std::nearbyint(x); }
  static F sqrt(F x) { return std::sqrt(x); }
  static F to_f(I v) { return static_cast<float>(v); }
  static I to_i(F x) { return static_cast<I>(x); }
  static U bits(F x) { return std::bit_cast<U>(x); }
  static F from_bits(U v) { return std::bit_cast<F>(v); }
  static U to_u(I v) { return static_cast<U>(v); }
  static I to_i(U v) { return static_cast<I>(v); }
};

// ---- building blocks ----

// Horner's rule, c[0] the highest degree; each product and sum rounded apart.
template <class K, std::size_t N>
typename K::F poly(const K& k, const typename K::F& x, const std::array<double, N>& c) {
  typename K::F p = k.f(c[0]);
  for (std::size_t i = 1; i < N; ++i) p = p * x + k.f(c[i]);
  return p;
}

template <class K>
typename K::F abs(const K& k, const typename K::F& x) {
  return k.from_bits(k.bits(x) & k.u(0x7fffffffu));
}
// x with the sign bit of s (copysign); x non-negative (its sign bit clear).
template <class K>
typename K::F with_sign_of(const K& k, const typename K::F& x, const typename K::F& s) {
  return k.from_bits(k.bits(x) | (k.bits(s) & k.u(0x80000000u)));
}
template <class K>
typename K::M sign_bit(const K& k, const typename K::F& x) {
  return (k.bits(x) & k.u(0x80000000u)) != k.u(0);
}
// x clamped to [lo, hi]; NaN gives lo (callers select NaN back at the end).
template <class K>
typename K::F clamp(const K& k, const typename K::F& x, double lo, double hi) {
  return k.sel(x > k.f(lo), k.sel(x < k.f(hi), x, k.f(hi)), k.f(lo));
}
// 2^n for n in [-126, 127], exactly.
template <class K>
typename K::F pow2i(const K& k, const typename K::I& n) {
  return k.from_bits(k.to_u(n + k.i(127)) << k.u(23));
}
// x 2^n for n in [-252, 254]: two exact scalings, so one rounding (into the
// subnormals, or to infinity).
template <class K>
typename K::F ldexp(const K& k, const typename K::F& x, const typename K::I& n) {
  const typename K::I h = n >> k.i(1);
  return x * pow2i(k, h) * pow2i(k, n - h);
}

// Products and sums exactly, as two floats (Dekker), with + - * only: no
// fused multiply-add (Vulkan's Fma may be two roundings).
template <class K>
std::pair<typename K::F, typename K::F> split(const K& k, const typename K::F& a) {
  const typename K::F t = a * k.f(4097.0);  // 2^12 + 1
  const typename K::F hi = t - (t - a);
  return {hi, a - hi};
}
template <class K>
std::pair<typename K::F, typename K::F> two_prod(const K& k, const typename K::F& a,
                                                 const typename K::F& b) {
  const typename K::F p = a * b;
  const auto [ah, al] = split(k, a);
  const auto [bh, bl] = split(k, b);
  const typename K::F e = ((ah * bh - p) + ah * bl + al * bh) + al * bl;
  return {p, e};
}

template <class K>
std::pair<typename K::F, typename K::F> two_sum(const K&, const typename K::F& a,
                                                const typename K::F& b) {
  const typename K::F s = a + b;
  const typename K::F bb = s - a;
  return {s, (a - (s - bb)) + (b - bb)};
}

// ---- exp family ----

inline constexpr double kLn2Hi = 0.693359375;             // 9 bits: n kLn2Hi is exact
inline constexpr double kLn2Lo = -2.1219444005469057e-4;  // ln 2 - kLn2Hi
inline constexpr double kLog2e = 1.4426950408889634;

// expm1(r) = r + r^2 P(r): Taylor to r^10, |r| <= ln 2 (truncation < 2^-29 relative).
template <class K>
typename K::F expm1_poly(const K& k, const typename K::F& r) {
  static constexpr std::array<double, 9> c{
      1.0 / 3628800, 1.0 / 362880, 1.0 / 40320, 1.0 / 5040, 1.0 / 720,
      1.0 / 120,     1.0 / 24,     1.0 / 6,     0.5};
  return r + r * (r * poly(k, r, c));  // r * (r P): keeps -0
}

// exp(x) 2^s (s in [-2, 2]) as 2^n (1 + q), x = n ln 2 + r, |r| <= ln 2 / 2.
template <class K>
typename K::F exp_scaled(const K& k, const typename K::F& x, int s) {
  const typename K::F xc = clamp(k, x, -110.0, 100.0);
  const typename K::F n = k.rint(xc * k.f(kLog2e));
  const typename K::F r = (xc - n * k.f(kLn2Hi)) - n * k.f(kLn2Lo);
  const typename K::F e = ldexp(k, k.f(1) + expm1_poly(k, r), k.to_i(n) + k.i(s));
  return k.sel(k.isnan(x), x, e);
}

template <class K>
typename K::F exp(const K& k, const typename K::F& x) {
  return exp_scaled(k, x, 0);
}

template <class K>
typename K::F exp2(const K& k, const typename K::F& x) {
  const typename K::F xc = clamp(k, x, -160.0, 160.0);
  const typename K::F n = k.rint(xc);
  const typename K::F r = (xc - n) * k.f(std::numbers::ln2);  // xc - n exact
  const typename K::F e = ldexp(k, k.f(1) + expm1_poly(k, r), k.to_i(n));
  return k.sel(k.isnan(x), x, e);
}

// |x| < ln 2: the polynomial itself. Otherwise x = n ln 2 + r and
// expm1(x) = 2^n q + (2^n - 1) (both terms exact for n <= 24), or
// 2^n (1 + q) - 1 past that.
template <class K>
typename K::F expm1(const K& k, const typename K::F& x) {
  using I = typename K::I;
  const typename K::F xc = clamp(k, x, -110.0, 100.0);
  const typename K::F n = k.rint(xc * k.f(kLog2e));
  const typename K::F r = (xc - n * k.f(kLn2Hi)) - n * k.f(kLn2Lo);
  const typename K::F q = expm1_poly(k, r);
  const I ni = k.to_i(n);
  const typename K::F one = k.f(1);
  const typename K::F mid = ldexp(k, q, ni) + (ldexp(k, one, ni) - one);
  const typename K::F big = ldexp(k, one + q, ni) - one;
  typename K::F e = k.sel(ni > k.i(24), big, mid);
  e = k.sel(abs(k, x) < k.f(std::numbers::ln2), expm1_poly(k, x), e);
  return k.sel(k.either(k.isnan(x), x == k.f(0)), x, e);  // NaN, and zeros with their sign
}

// ---- log family ----

// log(1 + f) for f in [sqrt(1/2) - 1, sqrt(2) - 1]: with s = f / (2 + f),
// log(1 + f) = f - (f^2/2 - s (f^2/2 + R)), R = 2 atanh(s)/s - 2 (Taylor in
// s^2 to s^10). The quotient s only enters the small correction, so its
// rounding (Vulkan allows 2.5 ulp) stays well below an ulp of the result.
template <class K>
typename K::F log1p_kernel(const K& k, const typename K::F& f) {
  static constexpr std::array<double, 5> c{2.0 / 11, 2.0 / 9, 2.0 / 7, 2.0 / 5, 2.0 / 3};
  const typename K::F s = f / (k.f(2) + f);
  const typename K::F z = s * s;
  const typename K::F R = z * poly(k, z, c);
  const typename K::F hfsq = k.f(0.5) * f * f;
  return f - (hfsq - s * (hfsq + R));
}

// x = 2^e m, m in [sqrt(1/2), sqrt(2)) (subnormals scaled up first); x > 0
// finite (other lanes give garbage the callers replace).
template <class K>
std::pair<typename K::F, typename K::F> log_reduce(const K& k, const typename K::F& x) {
  using I = typename K::I;
  using U = typename K::U;
  const typename K::M sub = x < k.f(0x1p-126);
  const typename K::F xs = k.sel(sub, x * k.f(0x1p23), x);
  const U b = k.bits(xs);
  I e = k.to_i((b >> k.u(23)) & k.u(0xff)) - k.sel(sub, k.i(150), k.i(127));
  typename K::F m = k.from_bits((b & k.u(0x7fffff)) | k.u(0x3f800000));
  const typename K::M big = m > k.f(1.41421356237);
  m = k.sel(big, m * k.f(0.5), m);
  e = k.sel(big, e + k.i(1), e);
  return {k.to_f(e), m - k.f(1)};  // m - 1 exact
}

// NaN below 0 and for NaN, -inf at 0, +inf at +inf.
template <class K>
typename K::F log_specials(const K& k, const typename K::F& x, const typename K::F& r) {
  const double inf = std::numeric_limits<double>::infinity();
  typename K::F out = k.sel(x == k.f(inf), x, r);
  out = k.sel(x == k.f(0), k.f(-inf), out);
  return k.sel(k.either(x < k.f(0), k.isnan(x)), k.f(std::numeric_limits<double>::quiet_NaN()), out);
}

template <class K>
typename K::F log(const K& k, const typename K::F& x) {
  const auto [e, f] = log_reduce(k, x);
  const typename K::F r = e * k.f(kLn2Hi) + (log1p_kernel(k, f) + e * k.f(kLn2Lo));
  return log_specials(k, x, r);
}

template <class K>
typename K::F log2(const K& k, const typename K::F& x) {
  const auto [e, f] = log_reduce(k, x);
  const typename K::F r = e + log1p_kernel(k, f) * k.f(kLog2e);  // exact at powers of 2
  return log_specials(k, x, r);
}

// In the kernel's range, the kernel on x itself (exact argument, zeros kept);
// elsewhere log(u), u = 1 + x, plus c / u, c = x - (u - 1) the rounding of u
// (Fast2Sum, exact).
template <class K>
typename K::F log1p(const K& k, const typename K::F& x) {
  const double inf = std::numeric_limits<double>::infinity();
  const typename K::F one = k.f(1);
  const typename K::F u = one + x;
  const typename K::M large = abs(k, x) >= one;
  const typename K::F c = k.sel(large, one - (u - x), x - (u - one));
  const auto [e, f] = log_reduce(k, u);
  typename K::F r = e * k.f(kLn2Hi) + (log1p_kernel(k, f) + e * k.f(kLn2Lo)) + c / u;
  const typename K::M near = k.both(x > k.f(-0.29289321881), x < k.f(0.41421356237));
  r = k.sel(near, log1p_kernel(k, x), r);
  r = k.sel(x == k.f(inf), x, r);
  r = k.sel(x == k.f(-1), k.f(-inf), r);
  return k.sel(k.either(x < k.f(-1), k.isnan(x)), k.f(std::numeric_limits<double>::quiet_NaN()), r);
}

// ---- trigonometric ----

inline constexpr double kPio2Hi = 1.5707963705062866;    // f32(pi / 2)
inline constexpr double kPio2Lo = -4.371138828673793e-08;
inline constexpr double kPio4Hi = 0.7853981852531433;
inline constexpr double kPio4Lo = -2.1855694143368964e-08;
inline constexpr double kPiHi = 3.1415927410125732;
inline constexpr double kPiLo = -8.742277657347586e-08;

template <class K>
struct Reduced {
  typename K::U q;     // the quadrant
  typename K::F r, e;  // r + e, |r| <= pi/4, |e| <= ulp(r)/2
};

// |x| = (4j + q) pi/2 + r, |r| <= pi/4, for any finite |x|: Payne-Hanek with
// integer arithmetic, so the result does not depend on the device's float
// rounding. |x| = m 2^(E-23); the bits of 2/pi that give multiples of 4 are
// skipped, 96 are multiplied by m (mod 2^96): the top 2 bits are q, the next
// 64 the fraction. |x| <= pi/4 gives q = 0, r = |x|.
template <class K>
Reduced<K> trig_reduce(const K& k, const typename K::F& ax) {
  using U = typename K::U;
  using I = typename K::I;
  // 2/pi in binary, after one word of zeros (the integer part).
  static constexpr std::array<std::uint32_t, 8> kTwoOverPi{
      0x00000000u, 0xa2f9836eu, 0x4e441529u, 0xfc2757d1u,
      0xf534ddc0u, 0xdb629599u, 0x3c439041u, 0xfe5163abu};
  const U b = k.bits(ax);
  I E = k.to_i(b >> k.u(23)) - k.i(127);
  E = k.sel(E < k.i(-1), k.i(-1), k.sel(E > k.i(127), k.i(127), E));  // other lanes: any word
  const U m = (b & k.u(0x7fffff)) | k.u(0x800000);
  const U start = k.to_u(E + k.i(7));  // first bit wanted, counting the zero word
  const U w = start >> k.u(5), sh = start & k.u(31);
  const auto word = [&](unsigned j) {  // kTwoOverPi[w + j], w in [0, 4]
    U t = k.u(kTwoOverPi[j]);
    for (unsigned v = 1; v <= 4; ++v) t = k.sel(w == k.u(v), k.u(kTwoOverPi[v + j]), t);
    return t;
  };
  const U t0 = word(0), t1 = word(1), t2 = word(2), t3 = word(3);
  const U back = k.u(31) - sh;  // (t >> 1) >> (31 - sh): no shift by 32 when sh == 0
  const U w0 = (t0 << sh) | ((t1 >> k.u(1)) >> back);
  const U w1 = (t1 << sh) | ((t2 >> k.u(1)) >> back);
  const U w2 = (t2 << sh) | ((t3 >> k.u(1)) >> back);
  // 32 x 32 -> 64 bits in 16-bit halves (no 64-bit integers needed).
  const auto wide = [&](const U& a, const U& c) {
    const U al = a & k.u(0xffff), ah = a >> k.u(16), cl = c & k.u(0xffff), ch = c >> k.u(16);
    const U ll = al * cl, lh = al * ch, hl = ah * cl, hh = ah * ch;
    const U mid = lh + (ll >> k.u(16));
    const U mid2 = hl + (mid & k.u(0xffff));
    return std::pair<U, U>{hh + (mid >> k.u(16)) + (mid2 >> k.u(16)),
                           (mid2 << k.u(16)) | (ll & k.u(0xffff))};
  };
  const auto [h2, r2] = wide(m, w2);
  const auto [h1, l1] = wide(m, w1);
  const U r1 = l1 + h2;
  const U r0 = m * w0 + h1 + k.sel(r1 < l1, k.u(1), k.u(0));
  const U fh = (r0 << k.u(2)) | (r1 >> k.u(30));
  const U fl = (r1 << k.u(2)) | (r2 >> k.u(30));
  // The fraction as a signed 64-bit value (a fraction past 1/2 is the next
  // quadrant's negative one), in three exactly representable pieces.
  const U q = ((r0 >> k.u(30)) + (fh >> k.u(31))) & k.u(3);
  const typename K::F hi = k.to_f(k.to_i(fh) >> k.i(8)) * k.f(0x1p-24);
  const typename K::F mid = k.to_f(k.to_i(((fh & k.u(0xff)) << k.u(16)) | (fl >> k.u(16)))) * k.f(0x1p-48);
  const typename K::F lo = k.to_f(k.to_i(fl & k.u(0xffff))) * k.f(0x1p-64);
  // frac = fa + fb and r = frac pi/2 = r_hi + r_lo, each as two floats.
  const auto [fa, fe] = two_sum(k, hi, mid);
  const typename K::F fb = fe + lo;
  const auto [p, pe] = two_prod(k, fa, k.f(kPio2Hi));
  const typename K::F tail = pe + (fa * k.f(kPio2Lo) + fb * k.f(kPio2Hi));
  const typename K::F r_hi = p + tail;
  const typename K::F r_lo = tail - (r_hi - p);
  const typename K::M small = ax <= k.f(kPio4Hi);
  return {k.sel(small, k.u(0), q), k.sel(small, ax, r_hi), k.sel(small, k.f(0), r_lo)};
}

// sin(r + e), |r| <= pi/4, e a correction below half an ulp of r:
// r + (e (1 - z/2) - r z P(z)), Taylor to r^11.
template <class K>
typename K::F sin_poly(const K& k, const typename K::F& r, const typename K::F& e) {
  static constexpr std::array<double, 5> c{1.0 / 39916800, -1.0 / 362880, 1.0 / 5040,
                                           -1.0 / 120, 1.0 / 6};
  const typename K::F z = r * r;
  return r + (e * (k.f(1) - k.f(0.5) * z) - r * (z * poly(k, z, c)));
}
// cos(r + e): 1 - z/2 + (z^2 C(z) - r e), with the rounding of 1 - z/2 kept.
template <class K>
typename K::F cos_poly(const K& k, const typename K::F& r, const typename K::F& e) {
  static constexpr std::array<double, 5> c{1.0 / 479001600, -1.0 / 3628800, 1.0 / 40320,
                                           -1.0 / 720, 1.0 / 24};
  const typename K::F z = r * r;
  const typename K::F hz = k.f(0.5) * z;
  const typename K::F w = k.f(1) - hz;
  return w + (((k.f(1) - w) - hz) + (z * (z * poly(k, z, c)) - r * e));
}

template <class K>
typename K::F nan_if_not_finite(const K& k, const typename K::F& x, const typename K::F& r) {
  const typename K::M bad = k.negate(abs(k, x) <= k.f(std::numeric_limits<float>::max()));
  return k.sel(bad, k.f(std::numeric_limits<double>::quiet_NaN()), r);
}

template <class K>
typename K::F sin(const K& k, const typename K::F& x) {
  const Reduced<K> a = trig_reduce(k, abs(k, x));
  typename K::F v = k.sel((a.q & k.u(1)) == k.u(0), sin_poly(k, a.r, a.e), cos_poly(k, a.r, a.e));
  // negate for q = 2, 3, and for x < 0: flip the sign bit
  const typename K::U flip = ((a.q & k.u(2)) << k.u(30)) ^ (k.bits(x) & k.u(0x80000000u));
  v = k.from_bits(k.bits(v) ^ flip);
  return nan_if_not_finite(k, x, v);
}

template <class K>
typename K::F cos(const K& k, const typename K::F& x) {
  const Reduced<K> a = trig_reduce(k, abs(k, x));
  typename K::F v = k.sel((a.q & k.u(1)) == k.u(0), cos_poly(k, a.r, a.e), sin_poly(k, a.r, a.e));
  const typename K::U flip = ((a.q + k.u(1)) & k.u(2)) << k.u(30);  // q = 1, 2
  v = k.from_bits(k.bits(v) ^ flip);
  return nan_if_not_finite(k, x, v);
}

// sin r / cos r, or -cos r / sin r in odd quadrants (one division).
template <class K>
typename K::F tan(const K& k, const typename K::F& x) {
  const Reduced<K> a = trig_reduce(k, abs(k, x));
  const typename K::F s = sin_poly(k, a.r, a.e), c = cos_poly(k, a.r, a.e);
  const typename K::M odd = (a.q & k.u(1)) != k.u(0);
  typename K::F v = k.sel(odd, -c, s) / k.sel(odd, s, c);
  v = k.from_bits(k.bits(v) ^ (k.bits(x) & k.u(0x80000000u)));
  return nan_if_not_finite(k, x, v);
}

// ---- inverse trigonometric ----

// asin(s) - s = s z P(z), z = s^2 <= 1/4: Taylor to s^25.
template <class K>
typename K::F asin_tail(const K& k, const typename K::F& s, const typename K::F& z) {
  static constexpr std::array<double, 12> c{
      0.006447210311889649, 0.0073125258735988454, 0.008390335809616815, 0.009761609529194078,
      0.011551800896139705, 0.01396484375,         0.017352764423076924, 0.022372159090909092,
      0.030381944444444444, 0.044642857142857144,  0.075,                1.0 / 6};
  return s * (z * poly(k, z, c));
}

// For |x| > 1/2: s = sqrt(w), w = (1 - |x|)/2 exact; s = s_hi + c exactly enough
// (s_hi: s's top 12 bits, c from w - s_hi^2, which is exact), so the device's
// square root rounding does not reach the result.
template <class K>
struct HalfAngle {
  typename K::F s_hi, c, tail;  // asin(sqrt(w)) = s_hi + c + tail
};
template <class K>
HalfAngle<K> half_angle(const K& k, const typename K::F& w) {
  const typename K::F s = k.sqrt(w);
  const typename K::F s_hi = k.from_bits(k.bits(s) & k.u(0xfffff000u));
  const typename K::F den = s + s_hi;
  const typename K::F c = (w - s_hi * s_hi) / k.sel(den == k.f(0), k.f(1), den);  // w = 0: 0
  return {s_hi, c, asin_tail(k, s, w)};
}

template <class K>
typename K::F asin(const K& k, const typename K::F& x) {
  const typename K::F ax = abs(k, x);
  const typename K::F small = ax + asin_tail(k, ax, ax * ax);
  const auto h = half_angle(k, (k.f(1) - ax) * k.f(0.5));
  const typename K::F two = k.f(2);
  const typename K::F large =
      (k.f(kPio2Hi) - two * h.s_hi) + (k.f(kPio2Lo) - two * (h.c + h.tail));
  typename K::F r = with_sign_of(k, k.sel(ax <= k.f(0.5), small, large), x);
  return k.sel(k.either(ax > k.f(1), k.isnan(x)), k.f(std::numeric_limits<double>::quiet_NaN()), r);
}

template <class K>
typename K::F acos(const K& k, const typename K::F& x) {
  const typename K::F ax = abs(k, x);
  const typename K::F two = k.f(2);
  const typename K::F mid = k.f(kPio2Hi) - ((x + asin_tail(k, x, x * x)) - k.f(kPio2Lo));
  const auto hp = half_angle(k, (k.f(1) - x) * k.f(0.5));  // x > 1/2
  const typename K::F pos = two * (hp.s_hi + (hp.c + hp.tail));
  const auto hn = half_angle(k, (k.f(1) + x) * k.f(0.5));  // x < -1/2
  const typename K::F neg = (k.f(kPiHi) - two * hn.s_hi) + (k.f(kPiLo) - two * (hn.c + hn.tail));
  typename K::F r = k.sel(ax <= k.f(0.5), mid, k.sel(x > k.f(0), pos, neg));
  return k.sel(k.either(ax > k.f(1), k.isnan(x)), k.f(std::numeric_limits<double>::quiet_NaN()), r);
}

// atan(t) for 0 <= t <= tan(pi/8): t + t z P(z), Taylor to t^19.
template <class K>
typename K::F atan_poly(const K& k, const typename K::F& t) {
  static constexpr std::array<double, 9> c{1.0 / 19, -1.0 / 17, 1.0 / 15, -1.0 / 13, 1.0 / 11,
                                           -1.0 / 9, 1.0 / 7,   -1.0 / 5,  1.0 / 3};
  const typename K::F z = t * t;
  return t - t * (z * poly(k, z, c));
}
// atan(t) for 0 <= t <= 1 (t > tan(pi/8): pi/4 + atan((t - 1)/(t + 1))).
template <class K>
typename K::F atan01(const K& k, const typename K::F& t) {
  const typename K::M mid = t > k.f(0.41421356237);
  const typename K::F u = k.sel(mid, (t - k.f(1)) / (t + k.f(1)), t);
  const typename K::F p = atan_poly(k, u);
  return k.sel(mid, k.f(kPio4Hi) + (p + k.f(kPio4Lo)), p);
}

template <class K>
typename K::F atan(const K& k, const typename K::F& x) {
  const typename K::F ax = abs(k, x);
  const typename K::M big = ax > k.f(1);
  const typename K::F a = atan01(k, k.sel(big, k.f(1) / ax, ax));
  const typename K::F r = k.sel(big, k.f(kPio2Hi) + (k.f(kPio2Lo) - a), a);
  return k.sel(k.isnan(x), x, with_sign_of(k, r, x));
}

// The angle of (x, y) away from the special cases (zeros, infinities, NaN):
// atan of min/max, then the octant.
template <class K>
typename K::F atan2_finite(const K& k, const typename K::F& y, const typename K::F& x) {
  const typename K::F ay = abs(k, y), ax = abs(k, x);
  const typename K::M swap = ay > ax;
  typename K::F a = atan01(k, k.sel(swap, ax, ay) / k.sel(swap, ay, ax));
  a = k.sel(swap, k.f(kPio2Hi) + (k.f(kPio2Lo) - a), a);
  a = k.sel(sign_bit(k, x), k.f(kPiHi) + (k.f(kPiLo) - a), a);
  return with_sign_of(k, a, y);
}

// atan2(y, x) with C's special values: NaN in, NaN out; y = +-0 gives y for
// x >= +0 and +-pi for x <= -0; y = +-inf gives +-pi/2, or +-pi/4 / +-3pi/4
// with x infinite too; x = +inf gives +-0 and x = -inf +-pi for finite y.
template <class K>
typename K::F atan2(const K& k, const typename K::F& y, const typename K::F& x) {
  using F = typename K::F;
  const double pi = std::numbers::pi;
  const auto with_y_sign = [&](double v) { return with_sign_of(k, k.f(v), y); };
  const F inf = k.f(std::numeric_limits<double>::infinity());
  const typename K::M xneg = sign_bit(k, x);
  const typename K::M xinf = abs(k, x) == inf;
  F r = atan2_finite(k, y, x);
  r = k.sel(xinf, k.sel(xneg, with_y_sign(pi), with_y_sign(0.0)), r);
  const F corner = k.sel(xneg, with_y_sign(0.75 * pi), with_y_sign(0.25 * pi));
  r = k.sel(abs(k, y) == inf, k.sel(xinf, corner, with_y_sign(0.5 * pi)), r);
  r = k.sel(y == k.f(0), k.sel(xneg, with_y_sign(pi), y), r);
  return k.sel(k.either(k.isnan(x), k.isnan(y)), k.f(std::numeric_limits<double>::quiet_NaN()), r);
}

// ---- hyperbolic ----

template <class K>
typename K::F sinh(const K& k, const typename K::F& x) {
  static constexpr std::array<double, 6> c{1.0 / 6227020800, 1.0 / 39916800, 1.0 / 362880,
                                           1.0 / 5040,       1.0 / 120,      1.0 / 6};
  const typename K::F ax = abs(k, x);
  const typename K::F z = ax * ax;
  const typename K::F small = ax + ax * (z * poly(k, z, c));  // |x| < 1: Taylor to x^15
  const typename K::F h = exp_scaled(k, ax, -1);               // e^|x| / 2
  const typename K::F large = h - k.f(0.25) / h;
  const typename K::F r = with_sign_of(k, k.sel(ax < k.f(1), small, large), x);
  return k.sel(k.isnan(x), x, r);
}

template <class K>
typename K::F cosh(const K& k, const typename K::F& x) {
  const typename K::F h = exp_scaled(k, abs(k, x), -1);
  return h + k.f(0.25) / h;  // NaN stays NaN
}

// |x| < 0.55: Taylor to x^19; past it 1 - 2 / (expm1(2|x|) + 2).
template <class K>
typename K::F tanh(const K& k, const typename K::F& x) {
  static constexpr std::array<double, 9> c{
      -0.00023912911424355248149, 0.00059002744094558598138, -0.0014558343870513182682,
      0.0035921280365724810169,   -0.0088632355299021965689, 0.021869488536155202822,
      -0.053968253968253968254,   0.13333333333333333333,    -0.33333333333333333333};
  const typename K::F ax = abs(k, x);
  const typename K::F z = ax * ax;
  const typename K::F small = ax + ax * (z * poly(k, z, c));
  const typename K::F e = expm1(k, ax + ax);
  const typename K::F large = k.f(1) - k.f(2) / (e + k.f(2));
  const typename K::F r = with_sign_of(k, k.sel(ax < k.f(0.55), small, large), x);
  return k.sel(k.isnan(x), x, r);
}

// 1 / (1 + e^-x) for x >= 0, e^x / (1 + e^x) below: e^-|x| never overflows,
// and very negative x keeps its subnormal results.
template <class K>
typename K::F sigmoid(const K& k, const typename K::F& x) {
  const typename K::F e = exp(k, -abs(k, x));
  const typename K::F d = k.f(1) + e;
  const typename K::F r = k.sel(x >= k.f(0), k.f(1) / d, e / d);
  return k.sel(k.isnan(x), x, r);
}

// ---- error function ----

// |x| < 1: x P(x^2), Taylor to x^23. 1 <= |x|: 1 - e^(-x^2) g(x), g(x) =
// erfc(x) e^(x^2) as a Chebyshev fit in t = (x - 2.5) / 1.5 over x in [1, 4]
// (mpmath.chebyfit, 2e-9 relative; erf rounds to 1 past 3.92).
template <class K>
typename K::F erf(const K& k, const typename K::F& x) {
  static constexpr std::array<double, 12> taylor{
      -1.2290555301717926e-09, 1.4807192815879218e-08, -1.6365844691234924e-07,
      1.6462114365889246e-06,  -1.492565035840625e-05, 0.00012055332981789664,
      -0.0008548327023450852,  0.005223977625442188,   -0.026866170645131252,
      0.11283791670955126,     -0.37612638903183754,   1.1283791670955126};
  static constexpr std::array<double, 14> g{
      -4.898928590381088e-06, 1.3805364559225202e-05, -2.1006044202482388e-05,
      5.498832497141119e-05,  -0.00016385368138163448, 0.00041446201865060015,
      -0.0010051734595985596, 0.0024017255032474033,  -0.005570817125703192,
      0.012489698116966154,   -0.027005289689862065,  0.056110473057510685,
      -0.11152102025594358,   0.21080636426942342};
  const typename K::F ax = abs(k, x);
  const typename K::F small = ax * poly(k, ax * ax, taylor);
  const typename K::F c = k.sel(ax < k.f(4), ax, k.f(4));
  const typename K::F t = (c - k.f(2.5)) * k.f(1.0 / 1.5);
  const typename K::F large = k.f(1) - exp(k, -(c * c)) * poly(k, t, g);
  const typename K::F r = with_sign_of(k, k.sel(ax < k.f(1), small, large), x);
  return k.sel(k.isnan(x), x, r);
}

// ---- power ----

// log2(a) for finite a > 0 as two floats (about 2^-40 relative): a = 2^e m,
// m in [sqrt(1/2), sqrt(2)), m c_i = 1 + f with c_i ~ 1 / (1 + i/16) from a
// table (i = rint(16 (m - 1)), c_0 = 1: no cancellation near a = 1), f exact
// as two floats, log1p(f) = f - f^2/2 + f^3 P(f) for |f| <= 0.045.
template <class K>
std::pair<typename K::F, typename K::F> log2_wide(const K& k, const typename K::F& a) {
  using F = typename K::F;
  static constexpr std::array<double, 13> c{
      1.454545497894287,  1.3333333730697632, 1.2307692766189575, 1.1428571939468384,
      1.0666667222976685, 1.0,                0.9411764740943909, 0.8888888955116272,
      0.8421052694320679, 0.800000011920929,  0.761904776096344,  0.7272727489471436,
      0.695652186870575};
  static constexpr std::array<double, 13> t_hi{  // -log2(c_i)
      -0.5405684113502502,  -0.4150375425815582, -0.2995603382587433, -0.1926451474428177,
      -0.09310948103666306, 0.0,                 0.08746283501386642, 0.16992498934268951,
      0.2479275017976761,   0.32192808389663696, 0.39231738448143005, 0.45943158864974976,
      0.523561954498291};
  static constexpr std::array<double, 13> t_lo{
      -1.3008114585488784e-08, 3.07052328007984e-10,   2.655258013462003e-09,
      5.006929093553936e-09,   1.4027737860189404e-09, 0.0,
      8.62015181457565e-10,    1.3507072127438846e-09, 8.969937570491027e-10,
      -1.0507105407953077e-08, 1.1425041357426835e-08, -1.3008114585488784e-08,
      -2.5313566354157047e-08};
  static constexpr std::array<double, 7> p{1.0 / 9, -1.0 / 8, 1.0 / 7, -1.0 / 6,
                                           1.0 / 5, -1.0 / 4, 1.0 / 3};
  const auto [e, f0] = log_reduce(k, a);
  const F m = f0 + k.f(1);
  const typename K::I i = k.to_i(k.rint(f0 * k.f(16)));  // -5 .. 7
  F ci = k.f(c[0]), th = k.f(t_hi[0]), tl = k.f(t_lo[0]);
  for (int j = 1; j < 13; ++j) {
    const typename K::M at = i == k.i(j - 5);
    ci = k.sel(at, k.f(c[j]), ci);
    th = k.sel(at, k.f(t_hi[j]), th);
    tl = k.sel(at, k.f(t_lo[j]), tl);
  }
  const auto [q, qe] = two_prod(k, m, ci);
  const F fh0 = q - k.f(1);  // exact
  const F fh = fh0 + qe;
  const F fl = qe - (fh - fh0);
  const auto [sq, sqe] = two_prod(k, fh, fh);
  const F half = k.f(0.5);
  const auto [s, se] = two_sum(k, fh, -(half * sq));
  const F low = ((se + fl) - half * (sqe + k.f(2) * fh * fl)) + sq * fh * poly(k, fh, p);
  const F lh = s + low;
  const F ll = low - (lh - s);  // log1p(f) = lh + ll
  // times log2(e) (two floats), plus e and -log2(c_i)
  const auto [mh, me] = two_prod(k, lh, k.f(1.4426950216293335));
  const F ml = me + (lh * k.f(1.925963033500011e-08) + ll * k.f(1.4426950216293335));
  const auto [s1, s1e] = two_sum(k, e, th);
  const auto [s2, s2e] = two_sum(k, s1, mh);
  const F lo = ((s1e + s2e) + tl) + ml;
  const F gh = s2 + lo;
  return {gh, lo - (gh - s2)};
}

// x^y as IEEE 754 and C define it: pow(x, 0) = pow(1, y) = 1 (NaN too),
// pow(-1, +-inf) = 1, NaN for a negative finite base and a non-integer
// exponent, signed zeros and infinities from zero and infinite bases with odd
// integer exponents. Elsewhere exp2(y log2|x|), both in two floats.
template <class K>
typename K::F pow(const K& k, const typename K::F& x, const typename K::F& y) {
  using F = typename K::F;
  using M = typename K::M;
  const double inf = std::numeric_limits<double>::infinity();
  const F ax = abs(k, x), ay = abs(k, y);
  // The general case (garbage where a special case below takes over).
  const F a = k.sel(k.both(ax > k.f(0), ax < k.f(inf)), ax, k.f(1));
  const auto [gh, gl] = log2_wide(k, a);
  const auto [wh, we] = two_prod(k, k.sel(ay < k.f(inf), y, k.f(0)), gh);
  const F wl = we + y * gl;
  const F wc = clamp(k, wh, -200.0, 200.0);
  const F n = k.rint(wc);
  const F r = ((wc - n) + k.sel(wc == wh, wl, k.f(0))) * k.f(std::numbers::ln2);
  F out = ldexp(k, k.f(1) + expm1_poly(k, r), k.to_i(clamp(k, n, -250.0, 250.0)));
  // Zero and infinite bases, infinite exponents.
  const M yneg = y < k.f(0);
  out = k.sel(ax == k.f(0), k.sel(yneg, k.f(inf), k.f(0)), out);
  out = k.sel(ax == k.f(inf), k.sel(yneg, k.f(0), k.f(inf)), out);
  const M grows = (ax > k.f(1)) == (y > k.f(0));  // |x| > 1 and y = +inf, or < 1 and -inf
  const F yinf = k.sel(ax == k.f(1), k.f(1), k.sel(grows, k.f(inf), k.f(0)));
  out = k.sel(ay == k.f(inf), yinf, out);
  // Negative bases: odd integer exponents negate, non-integers are NaN.
  const M integer = k.rint(y) == y;
  const F hy = y * k.f(0.5);
  const M odd = k.both(integer, k.rint(hy) != hy);
  out = k.sel(k.both(odd, sign_bit(k, x)), -out, out);
  const M bad = k.either(k.either(k.isnan(x), k.isnan(y)),
                         k.both(k.both(x < k.f(0), x > k.f(-inf)), k.negate(integer)));
  out = k.sel(bad, k.f(std::numeric_limits<double>::quiet_NaN()), out);
  return k.sel(k.either(y == k.f(0), x == k.f(1)), k.f(1), out);
}

}  // namespace kiln::detail::f32m
