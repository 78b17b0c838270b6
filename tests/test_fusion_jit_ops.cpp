// The CPU code generator's coverage (backends/cpu/jit.hpp), enumerated from its
// own predicate (cpu::jit_op), not from a list kept here: every elementwise
// primitive and dtype pair it says it covers, inside a fused body that must be
// compiled (a body that fell back to the flat kernels fails the test) and must
// give the unfused bits, at every length from 1 to 34 and a few past 64 and
// 4096 (full vectors and every tail), with NaNs, infinities, signed zeros,
// subnormals, huge magnitudes and integer extremes. The fusion-cpu-<level>
// entries of tests/meson.build run it at every SIMD level (the generator at
// x86-64-v3 and v4; below them jit_op covers nothing and the bits are checked
// all the same on the flat kernels).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <kiln/dsl/backend.hpp>
#include <kiln/dsl/fusion.hpp>
#include <kiln/dsl/program.hpp>
#include <kiln/dsl/trace.hpp>
#include <kiln/kiln.hpp>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/backends/cpu/float_ops.hpp"
#include "kiln/backends/cpu/jit.hpp"
#include "kiln/backends/cpu/simd.hpp"
#include "fusion_util.hpp"

using namespace kiln;
using kiln::fusion_test::bytes_of;

namespace {

Device dev() { return default_device(); }

// n elements of `d` as bytes: specials at every third place, random bits (f32:
// random values of every magnitude) elsewhere.
std::vector<std::byte> values(DType d, std::size_t n, std::uint32_t seed) {
  std::mt19937 g(seed);
  const std::size_t e = d == DType::kBool ? 1 : 4;
  std::vector<std::byte> out(n * e);
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const float f32s[] = {std::numeric_limits<float>::quiet_NaN(),
                        -std::numeric_limits<float>::quiet_NaN(),
                        0.0f, -0.0f, kInf, -kInf, 1e-40f, -1e-45f,
                        std::numeric_limits<float>::min(), std::numeric_limits<float>::max(),
                        -std::numeric_limits<float>::max(), 88.72f, 89.0f, -87.5f, -104.0f,
                        1e10f, -3e9f, 2147483648.0f, -2147483904.0f, 4294967296.0f,
                        1.0f, -1.0f, 0.5f, 15.0f, -15.0f, 1e-7f};
  const std::int32_t i32s[] = {std::numeric_limits<std::int32_t>::min(),
                               std::numeric_limits<std::int32_t>::max(), -1, 0, 1, 31, 32, -32};
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t bits = g();
    const bool special = (i + seed) % 3 == 0;
    if (d == DType::kBool) {
      out[i] = static_cast<std::byte>(bits & 1u);
      continue;
    }
    if (d == DType::kF32) {
      float x = special ? f32s[(i / 3 + seed) % std::size(f32s)]
                        : std::ldexp(static_cast<float>(bits % 20001) / 1000.0f - 10.0f,
                                     static_cast<int>(g() % 41) - 20);
      std::memcpy(&bits, &x, 4);
    } else if (special) {
      std::memcpy(&bits, &i32s[(i / 3 + seed) % std::size(i32s)], 4);
    }
    std::memcpy(&out[i * 4], &bits, 4);
  }
  return out;
}

Array make(DType d, const Shape& s, std::uint32_t seed) {
  const std::vector<std::byte> v = values(d, static_cast<std::size_t>(numel(s)), seed);
  auto buf = HostBuffer::allocate(v.size());
  if (!v.empty()) std::memcpy(buf->host_data(), v.data(), v.size());
  return to_device(Array(d, s, std::move(buf)), dev());
}

// Equal bytes, or (f32) equal but for the sign and payload of NaNs: which
// operand's NaN an add returns is the compiler's choice (test_fusion.cpp).
bool same(DType d, const std::vector<std::byte>& a, const std::vector<std::byte>& b) {
  if (a == b) return true;
  if (d != DType::kF32 || a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); i += 4) {
    float x, y;
    std::memcpy(&x, &a[i], 4);
    std::memcpy(&y, &b[i], 4);
    if (std::memcmp(&x, &y, 4) != 0 && !(std::isnan(x) && std::isnan(y))) return false;
  }
  return true;
}

Params params_of(Prim p, DType out, const Shape& s) {
  if (family(p) == PrimFamily::kAstype) return DTypeParams{out};
  if (p == Prim::kReshape) return ShapeParams{s};
  return NoParams{};
}

// A fused body around `p`: a = where(c, x0, x1) (code of its own for every
// dtype), then p on a (and x1); alias ops, which compute nothing, as operands
// of another where.
Program body(Prim p, DType in, DType out, const Shape& s, const Shape& s1) {
  Trace t;
  const Array c = t.input({DType::kBool, s}, dev(), "c");
  const Array x0 = t.input({in, s}, dev(), "x0");
  const Array x1 = t.input({in, s1}, dev(), "x1");
  const Array a = where(c, x0, x1);
  const Aval res{out, s};
  const auto op = [&](std::vector<Array> xs) {
    return detail::bind(p, params_of(p, out, s), xs, res);
  };
  Array y;
  switch (family(p)) {
    case PrimFamily::kBinary: y = op({a, x1}); break;
    case PrimFamily::kWhere: y = op({c, x1, a}); break;
    default: y = op({a}); break;
  }
  if (has_trait(p, PrimTrait::kAlias)) y = where(c, y, op({where(c, x1, x0)}));
  const std::vector<Array> outs{y};
  Program prog = t.finish(outs);
  optimize(prog);
  return prog;
}

struct Covered {
  Prim prim;
  DType in, out;
  cpu::JitOp how;
};

std::vector<Covered> covered() {
  const DType dtypes[] = {DType::kF32, DType::kI32, DType::kU32, DType::kBool,
                          DType::kF64, DType::kF16, DType::kBF16};
  std::vector<Covered> out;
  for (const PrimInfo& i : all_prims()) {
    for (DType in : dtypes) {
      for (DType to : dtypes) {
        const cpu::JitOp how = cpu::jit_op(i.prim, in, to);
        if (how != cpu::JitOp::kNone) out.push_back({i.prim, in, to, how});
      }
    }
  }
  return out;
}

}  // namespace

TEST_CASE("CPU generated code: every op jit_op covers is compiled and gives the unfused bits") {
  if (dev().kind != Device::Kind::kCpu) return;
  const std::vector<Covered> ops = covered();
  std::ostringstream list;
  std::size_t calls = 0;
  for (const Covered& c : ops) {
    list << " " << name(c.prim) << "(" << name(c.in) << "->" << name(c.out)
         << (c.how == cpu::JitOp::kCall ? ", call)" : ")");
    calls += c.how == cpu::JitOp::kCall;
  }
  MESSAGE(std::string(cpu::isa_name(cpu::active_isa())) << ": " << ops.size() << " ops, " << calls
                                            << " as calls:" << list.str());
  if (cpu::jit_available()) {  // the transcendental ops of a training step at least
    for (Prim p : {Prim::kExp, Prim::kLog, Prim::kTanh, Prim::kSigmoid, Prim::kLog1p,
                   Prim::kExpm1}) {
      CHECK(cpu::jit_op(p, DType::kF32, DType::kF32) == cpu::JitOp::kCall);
    }
    CHECK(cpu::jit_op(Prim::kAstype, DType::kF32, DType::kI32) == cpu::JitOp::kInline);
    CHECK(cpu::jit_op(Prim::kAstype, DType::kBool, DType::kF32) == cpu::JitOp::kInline);
    CHECK(cpu::jit_op(Prim::kMul, DType::kI32, DType::kI32) == cpu::JitOp::kInline);
    CHECK(cpu::jit_op(Prim::kAstype, DType::kU32, DType::kF32) == cpu::JitOp::kCall);
    CHECK(cpu::jit_op(Prim::kLt, DType::kU32, DType::kBool) == cpu::JitOp::kCall);
    CHECK(cpu::jit_op(Prim::kSin, DType::kF32, DType::kF32) == cpu::JitOp::kCall);
    CHECK(cpu::jit_op(Prim::kPow, DType::kF32, DType::kF32) == cpu::JitOp::kNone);
    CHECK(cpu::jit_op(Prim::kExp, DType::kF64, DType::kF64) == cpu::JitOp::kNone);
  } else {
    CHECK(ops.empty());
  }
  std::vector<std::int64_t> lengths;
  for (std::int64_t n = 1; n <= 34; ++n) lengths.push_back(n);
  for (std::int64_t n : {63, 64, 65, 4099}) lengths.push_back(n);
  Backend& backend = backend_for(dev());
  for (const Covered& c : ops) {
    for (const bool scalar : {false, true}) {  // x1 a run, or one broadcast element
      for (std::int64_t n : lengths) {
        CAPTURE(name(c.prim));
        CAPTURE(name(c.in));
        CAPTURE(name(c.out));
        CAPTURE(scalar);
        CAPTURE(n);
        const Shape s{n}, s1 = scalar ? Shape{} : s;
        const Program p = body(c.prim, c.in, c.out, s, s1);
        const auto seed = static_cast<std::uint32_t>(n);
        const std::vector<Array> in{make(DType::kBool, s, seed), make(c.in, s, seed + 1),
                                    make(c.in, s1, seed + 2)};
        const std::vector<Array> env = eval_all(p, in);
        const std::vector<Step> steps = fuse(p);
        std::size_t kernels = 0;
        for (const Step& st : steps) {
          if (st.kernel == nullptr) continue;
          ++kernels;
          std::vector<Array> args;
          for (ValueId v : st.inputs) args.push_back(env[v]);
          const std::size_t before = cpu::jit_bodies_compiled();
          const auto bufs = backend.eval_fused(*st.kernel, args, {});
          // (one element: every equation runs once on scalars, no block code)
          if (n > 1) CHECK(cpu::jit_bodies_compiled() == before + 1);
          REQUIRE(bufs.size() == st.outputs.size());
          for (std::size_t o = 0; o < bufs.size(); ++o) {
            const Aval& a = p.avals[st.outputs[o]];
            CHECK(same(a.dtype, bytes_of(Array(a.dtype, a.shape, bufs[o])),
                       bytes_of(env[st.outputs[o]])));
          }
        }
        CHECK(kernels == 1);
      }
    }
  }
}

// The tables are derived from backends/cpu/float_ops.hpp; this fails when one
// is not: every op defined there has its SIMD kernel at this level (f32, f64),
// the transcendentals their vector function where the level has the vector ABI,
// and the code generator covers each (inline or by a call); the C library's
// scalar ops (pow, atan2) have none.
TEST_CASE("CPU fast paths: every float op of float_ops.hpp has its SIMD kernel and generated code") {
  if (dev().kind != Device::Kind::kCpu) return;
  const bool vector_abi = cpu::active_isa() == cpu::Isa::kX86V3 || cpu::active_isa() == cpu::Isa::kX86V4;
  std::size_t covered = 0;
  for (const PrimInfo& info : all_prims()) {
    visit_prim(info.prim, [&]<Prim P>(PrimC<P>) {
      CAPTURE(name(P));
      if constexpr (cpu::kFloatUnary<P> || cpu::kFloatBinary<P>) {
        for (DType d : {DType::kF32, DType::kF64}) {
          const bool kernel = cpu::simd_kernel(P, d, d) != nullptr;
          CHECK(kernel);
        }
        if constexpr (cpu::kFloatUnary<P> && has_trait(P, PrimTrait::kTranscendental)) {
          const bool vector = cpu::simd_vector_kernel(P, DType::kF32, DType::kF32) != nullptr;
          CHECK(vector == vector_abi);
        }
        if (cpu::jit_available()) CHECK(cpu::jit_op(P, DType::kF32, DType::kF32) != cpu::JitOp::kNone);
        ++covered;
      } else if constexpr (cpu::kScalarBinary<P>) {
        const bool kernel = cpu::simd_kernel(P, DType::kF32, DType::kF32) != nullptr;
        CHECK_FALSE(kernel);
        if (cpu::jit_available()) CHECK(cpu::jit_op(P, DType::kF32, DType::kF32) == cpu::JitOp::kNone);
      }
    });
  }
  CHECK(covered >= 30);  // the float unary and binary rows (32 today)
}
