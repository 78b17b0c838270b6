// bf16 on every device (docs/DTYPES.md, "bf16"): the conversion's golden bits
// (1.0, pi, NaN, ties, subnormals, overflow) on the host and on the device,
// astype to and from every dtype, one rounding per op, matmul accumulating in
// f32, the dtype rules' error messages, and the Vulkan kill switch.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <kiln/kiln.hpp>
#include <numbers>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/runtime/half.hpp"

using namespace kiln;

namespace {

Array f32_bits(const std::vector<std::uint32_t>& bits) {
  std::vector<float> v;
  for (std::uint32_t b : bits) v.push_back(std::bit_cast<float>(b));
  return array<float>(v, {static_cast<std::int64_t>(v.size())});
}

std::vector<std::uint16_t> words(const Array& a) {
  REQUIRE(a.dtype() == bf16);
  std::vector<std::uint16_t> out(static_cast<std::size_t>(a.size()));
  a.read_bytes(out.data());
  return out;
}

Array from_words(const std::vector<std::uint16_t>& w) {
  auto buf = HostBuffer::allocate(w.size() * 2);
  std::memcpy(buf->host_data(), w.data(), w.size() * 2);
  const Array host(DType::kBF16, Shape{static_cast<std::int64_t>(w.size())}, std::move(buf));
  return to_device(host, default_device());
}

std::vector<float> widened(const Array& a) { return astype(a, f32).to_vector<float>(); }

// What the device under test has (f16 and f64 are optional on Vulkan, and
// independent of bf16: ops-vulkan-no-f16 runs these cases without f16).
const DeviceInfo& info() {
  static const std::vector<DeviceInfo> all = devices();
  for (const DeviceInfo& d : all) {
    if (d.device == default_device()) return d;
  }
  FAIL("no DeviceInfo for ", default_device().to_string());
  return all.front();
}

// f32 bit patterns and the bf16 words round-to-nearest-even gives them.
struct Golden {
  std::uint32_t f32;
  std::uint16_t bf16;
};
const std::vector<Golden> kGolden = {
    {0x3f800000u, 0x3f80},  // 1.0
    {0x40490fdbu, 0x4049},  // pi (3.14159274): the dropped half is below the tie
    {0xc0000000u, 0xc000},  // -2
    {0x3f808000u, 0x3f80},  // a tie with an even kept half: stays
    {0x3f818000u, 0x3f82},  // a tie with an odd kept half: up to even
    {0x3f808001u, 0x3f81},  // just past the tie: up
    {0xbf818000u, 0xbf82},  // ties round the magnitude (sign kept)
    {0x7f7fffffu, 0x7f80},  // f32's largest rounds past bf16's largest: inf
    {0x7f7f0000u, 0x7f7f},  // bf16's largest
    {0x7f800000u, 0x7f80},  // inf
    {0xff800000u, 0xff80},  // -inf
    {0x00018000u, 0x0002},  // a subnormal tie: to even (no flush to zero)
    {0x00008000u, 0x0000},  // half the smallest subnormal: to even 0
    {0x80000000u, 0x8000},  // -0
    {0x7fc00000u, 0x7fc0},  // the quiet NaN
    {0x7f800001u, 0x7fc0},  // a NaN whose payload is all dropped: stays NaN
    {0xffffffffu, 0xffff},  // a negative NaN keeps its sign and upper payload
};

}  // namespace

TEST_CASE("bf16: the dtype's facts, and arrays print their values") {
  CHECK(name(bf16) == "bf16");
  CHECK(size_of(bf16) == 2);
  CHECK(is_inexact(bf16));
  CHECK(is_16bit_float(bf16));
  CHECK_FALSE(is_integer(bf16));
  std::ostringstream os;
  os << from_words({0x3f80, 0x4049, 0xc000});
  CHECK(os.str() == "Array([1, 3.140625, -2], dtype=bf16, shape=(3,))");
}

TEST_CASE("bf16: f32 rounds to nearest even on the host, NaN kept NaN; widening is exact") {
  for (const Golden& g : kGolden) {
    CAPTURE(g.f32);
    CHECK(float_to_bf16(std::bit_cast<float>(g.f32)) == g.bf16);
    const float back = bf16_to_float(g.bf16);
    CHECK(std::bit_cast<std::uint32_t>(back) == static_cast<std::uint32_t>(g.bf16) << 16);
  }
}

TEST_CASE("bf16: astype from f32 gives the golden bits on every device, and back exactly") {
  std::vector<std::uint32_t> in;
  for (const Golden& g : kGolden) in.push_back(g.f32);
  const Array h = astype(to_device(f32_bits(in), default_device()), bf16);
  CHECK(h.dtype() == bf16);
  CHECK(h.device() == default_device());
  const std::vector<std::uint16_t> got = words(h);
  for (std::size_t i = 0; i < kGolden.size(); ++i) {
    CAPTURE(kGolden[i].f32);
    CHECK(got[i] == kGolden[i].bf16);
  }
  // Every word widens to its upper-half f32 (NaN payloads included).
  const std::vector<float> wide = widened(h);
  for (std::size_t i = 0; i < kGolden.size(); ++i) {
    CHECK(std::bit_cast<std::uint32_t>(wide[i]) == static_cast<std::uint32_t>(got[i]) << 16);
  }
  // Jitted (the store rounds in the kernel) equals eager.
  const Array jit = filter_jit([](const Array& x) { return astype(x, bf16); })(
      to_device(f32_bits(in), default_device()));
  CHECK(words(jit) == got);
}

TEST_CASE("bf16: the device's f32 -> bf16 equals float_to_bf16 bit for bit on 2^20 patterns") {
  // On the CPU this is the AVX-512 BF16 path where the CPU has it (its
  // subnormal lanes redone), on Vulkan the kernel's integer rounding: every
  // sign and exponent, mantissas at and around the ties, NaN payloads,
  // subnormals, and random words.
  std::vector<std::uint32_t> in;
  for (std::uint32_t se = 0; se < 512; ++se) {
    for (std::uint32_t m : {0x0u, 0x1u, 0x7fffu, 0x8000u, 0x8001u, 0x18000u, 0x7f8000u,
                            0x7fffffu, 0x7fff7fu, 0x400000u, 0x12345u}) {
      in.push_back(se << 23 | m);
    }
  }
  std::mt19937 g(5);
  while (in.size() < (1u << 20)) in.push_back(static_cast<std::uint32_t>(g()));
  const std::vector<std::uint16_t> got =
      words(astype(to_device(f32_bits(in), default_device()), bf16));
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (got[i] != float_to_bf16(std::bit_cast<float>(in[i]))) {
      if (++wrong <= 5) MESSAGE("f32 bits ", in[i], " gave ", got[i]);
    }
  }
  CHECK(wrong == 0);
#if defined(__x86_64__) && defined(__GNUC__)
  if (default_device() == Device::cpu()) {
    MESSAGE("AVX-512 BF16: ", std::string(__builtin_cpu_supports("avx512bf16") ? "used" : "absent"));
  }
#endif
}

TEST_CASE("bf16: astype to and from every dtype") {
  const Array x = from_words({0x3f80, 0xc0a0, 0x4049, 0x0000, 0x4b80, 0xcf00});
  // 1, -5, 3.140625, 0, 2^24 (16777216), -2^31
  CHECK(astype(x, i32).to_vector<std::int32_t>() ==
        std::vector<std::int32_t>{1, -5, 3, 0, 16777216, INT32_MIN});
  CHECK(astype(x, u32).to_vector<std::uint32_t>() ==
        std::vector<std::uint32_t>{1, 0, 3, 0, 16777216, 0});  // saturates at 0
  CHECK(astype(x, bool_).to_vector<bool>() ==
        std::vector<bool>{true, true, true, false, true, true});
  CHECK(astype(x, f64).to_vector<double>() ==
        std::vector<double>{1, -5, 3.140625, 0, 16777216, -2147483648.0});
  if (info().f16) {
    // bf16 -> f16 rounds once (3.140625 is 3.140625 in f16 too; 2^24 overflows).
    const std::vector<float> h = astype(astype(x, f16), f32).to_vector<float>();
    CHECK(h[2] == 3.140625f);
    CHECK(std::isinf(h[4]));
    // f16 0.1 is 0.0999755859375 (0x3dccc000 in f32): up to 0x3dcd; 65504 up to 2^16.
    CHECK(words(astype(astype(array<float>({0.1f, 65504.0f}, {2}), f16), bf16)) ==
          std::vector<std::uint16_t>{0x3dcd, 0x4780});
  }
  // Into bf16 from each dtype: integers and f64 round to nearest even once.
  CHECK(words(astype(array<std::int32_t>({1, 257, 259, -3}, {4}), bf16)) ==
        std::vector<std::uint16_t>{0x3f80, 0x4380, 0x4382, 0xc040});
  CHECK(words(astype(array<std::uint32_t>({0u, 4294967295u}, {2}), bf16)) ==
        std::vector<std::uint16_t>{0x0000, 0x4f80});
  CHECK(words(astype(array<bool>({true, false}, {2}), bf16)) ==
        std::vector<std::uint16_t>{0x3f80, 0x0000});
  if (info().f64) {
    CHECK(words(astype(array<double>({std::numbers::pi, -1e300}, {2}), bf16)) ==
          std::vector<std::uint16_t>{0x4049, 0xff80});
  }
  CHECK(astype(x, bf16).dtype() == bf16);
}

TEST_CASE("bf16: each op rounds its f32 result once; scalars stay bf16; reductions accumulate in f32") {
  const Array one = from_words({0x3f80});
  // 1 + 2^-8 is a tie between 1 and 1 + 2^-7: to the even 1.
  const Array tiny = astype(array<float>({std::ldexp(1.0f, -8)}, {1}), bf16);
  CHECK(widened(one + tiny)[0] == 1.0f);
  CHECK(widened(one + tiny * 3.0)[0] == 1.015625f);  // 1 + 3 * 2^-8 -> 1 + 2^-6
  // A C++ scalar takes the array's dtype (JAX's weakly typed scalars alike).
  CHECK((one * 0.5).dtype() == bf16);
  CHECK((2.0 + one).dtype() == bf16);
  // 4096 ones: a running bf16 sum would stop at 256.
  const Array s = sum(ones({4096}, bf16));
  CHECK(s.dtype() == bf16);
  CHECK(widened(s)[0] == 4096.0f);
  CHECK(widened(mean(astype(array<float>({1, 2, 3, 4}, {4}), bf16)))[0] == 2.5f);
  // Creation ops round their f32 values once: full(pi), and arange's 257 and
  // 259 (ties: to 256 and 260).
  CHECK(words(full({2}, std::numbers::pi, bf16)) == std::vector<std::uint16_t>{0x4049, 0x4049});
  const std::vector<float> r = widened(arange(256.0, 260.0, 1.0, bf16));
  CHECK(r == std::vector<float>{256.0f, 256.0f, 258.0f, 260.0f});
  // scatter_add sums repeated indices in f32 too: 300 ones into one slot (a
  // running bf16 sum would stop at 256, where + 1 is a tie back to 256).
  const Array idx = array<std::int32_t>(std::vector<std::int32_t>(300, 0), {300});
  const Array slot = scatter_add(zeros({1}, bf16), idx, ones({300}, bf16), 0);
  CHECK(slot.dtype() == bf16);
  CHECK(widened(slot)[0] == 300.0f);
  // Unary math: exp(1) rounded once (2.71875, not f32's 2.7182817).
  CHECK(widened(exp(one))[0] == 2.71875f);
  // Jitted (a fused group of bf16 values) equals eager, bit for bit.
  const Array x = astype(array<float>({0.5f, -1.25f, 3.0f, 100.0f, 1e-3f}, {5}), bf16);
  auto f = [](const Array& a) { return exp(a * 0.01) * a + 1.0; };
  CHECK(words(filter_jit(f)(x)) == words(f(x)));
  CHECK(f(x).dtype() == bf16);
}

TEST_CASE("bf16: matmul accumulates in f32 and rounds once, and is differentiable") {
  // Terms of a few bf16 ulps over k = 96: a running bf16 sum would lose them.
  std::vector<float> av, bv;
  for (int i = 0; i < 4 * 96; ++i) av.push_back(0.25f + 0.01f * static_cast<float>(i % 13));
  for (int i = 0; i < 96 * 6; ++i) bv.push_back(1.0f - 0.0625f * static_cast<float>(i % 7));
  const Array a = astype(array<float>(av, {4, 96}), bf16);
  const Array b = astype(array<float>(bv, {96, 6}), bf16);
  const Array c = matmul(a, b);
  CHECK(c.dtype() == bf16);
  CHECK(c.shape() == Shape{4, 6});
  const std::vector<float> want = matmul(astype(a, f32), astype(b, f32)).to_vector<float>();
  const std::vector<float> got = widened(c);
  for (std::size_t i = 0; i < want.size(); ++i) {
    // One rounding to bf16: half an ulp, at most 2^-8 relative.
    CHECK(got[i] == doctest::Approx(want[i]).epsilon(std::ldexp(1.0, -8)));
  }
  const Array ga = grad([](const Array& x, const Array& y) {
    return sum(astype(matmul(x, y), f32));
  })(a, b);
  CHECK(ga.dtype() == bf16);
  const std::vector<float> row_sums = sum(astype(b, f32), 1).to_vector<float>();
  const std::vector<float> g = widened(ga);
  for (std::size_t i = 0; i < g.size(); ++i) {
    CHECK(g[i] == doctest::Approx(row_sums[i % 96]).epsilon(std::ldexp(1.0, -8)));
  }
}

TEST_CASE("bf16: no promotion; wrong dtypes are errors that name the op") {
  const Array x = astype(array<float>({1, 2}, {2}), bf16);
  if (info().f16) {  // JAX would promote to f32; kiln asks for astype
    const Array h = astype(array<float>({1, 2}, {2}), f16);
    CHECK_THROWS_WITH_AS(x + h, doctest::Contains("[add] dtype mismatch: bf16 and f16"),
                         DTypeError);
  }
  CHECK_THROWS_WITH_AS(matmul(x, astype(x, f32)),
                       doctest::Contains("[matmul] inputs have different dtypes bf16 and f32"),
                       DTypeError);
  CHECK_THROWS_WITH_AS(bitwise_and(x, x), doctest::Contains("[bitwise_and]"), DTypeError);
  CHECK_THROWS_WITH_AS(x.to_vector<float>(),
                       "[to_vector] requested element type f32 from an array of dtype bf16",
                       DTypeError);
}

TEST_CASE("bf16 with KILN_VK_DISABLE_BF16: refused on Vulkan with a DTypeError naming the op") {
  const char* off = std::getenv("KILN_VK_DISABLE_BF16");
  if (default_device() == Device::cpu() || off == nullptr || std::string(off) != "1") {
    MESSAGE("runs on Vulkan with KILN_VK_DISABLE_BF16=1 (meson test ops-vulkan-no-bf16)");
    return;
  }
  const Array x = array<float>({1, 2}, {2});
  CHECK_THROWS_WITH_AS(astype(x, bf16),
                       doctest::Contains("[astype] dtype bf16 is not supported on vulkan"),
                       DTypeError);
  CHECK_THROWS_WITH_AS(astype(x, bf16), doctest::Contains("KILN_VK_DISABLE_BF16"), DTypeError);
  // f16 shares the 16-bit storage feature and stays on.
  CHECK(info().f16);
  CHECK_FALSE(info().bf16);
  CHECK(astype(astype(x, f16), f32).to_vector<float>() == std::vector<float>{1, 2});
}
