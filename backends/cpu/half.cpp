// f16 and bf16 on the CPU: arrays are stored as 16-bit floats and every
// primitive that does arithmetic on them runs in f32 on widened copies, its
// result rounded once (runtime/half.hpp: nearest, ties to even). That is
// numpy's and the GPUs' per-operation rounding; reductions accumulate in f32
// (as XLA does on the CPU). Layout primitives move the 16-bit words as they
// are. The two formats differ only in the conversions, chosen per array here.
//
// Where the CPU has AVX-512 BF16 (checked at run time), f32 -> bf16 uses
// VCVTNEPS2BF16, 16 values per instruction. It rounds as float_to_bf16 does
// (nearest even on the bits, NaN -> upper half | 0x40) except that it treats
// subnormal inputs as zero, so those lanes are redone by float_to_bf16: the
// result is the portable one bit for bit (test_ops_bf16 compares them).
// Where it has F16C, f16 <-> f32 go 8 values per instruction; NaN lanes, whose
// payload F16C keeps (and quiets) where float_to_half gives the canonical
// quiet NaN and half_to_float keeps a signalling one, are redone by the
// portable functions, so the results are the portable ones bit for bit
// (test_ops_elementwise compares all 65536 halves and 2^20 floats). The
// scalar conversions made the f16 CNN example 4.5x slower than bf16. Both
// fast paths are x86-64-v3 and up (KILN_CPU_ISA can force the portable ones).
#include "kiln/backends/cpu/half.hpp"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define KILN_X86_INTRINSICS 1
#endif

#include "kiln/backends/cpu/cpu_backend.hpp"
#include "kiln/backends/cpu/simd.hpp"
#include "kiln/dsl/fusion.hpp"
#include "kiln/dsl/program.hpp"
#include "kiln/runtime/half.hpp"

namespace kiln::cpu {
namespace {

template <float (*kToFloat)(std::uint16_t)>
void widen_words(const std::uint16_t* h, float* f, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) f[i] = kToFloat(h[i]);
}

template <std::uint16_t (*kFromFloat)(float)>
void narrow_words(const float* f, std::uint16_t* h, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) h[i] = kFromFloat(f[i]);
}

#ifdef KILN_X86_INTRINSICS
__attribute__((target("avx512f,avx512bf16,avx512vl"))) void narrow_bf16_avx512(
    const float* f, std::uint16_t* h, std::int64_t n) {
  std::int64_t i = 0;
  const __m512i exponent = _mm512_set1_epi32(0x7f800000);
  const __m512i magnitude = _mm512_set1_epi32(0x7fffffff);
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_loadu_ps(f + i);
    const __m256bh r = _mm512_cvtneps_pbh(x);
    std::memcpy(h + i, &r, sizeof(r));
    const __m512i bits = _mm512_castps_si512(x);
    const unsigned subnormal = _mm512_testn_epi32_mask(bits, exponent) &
                               _mm512_test_epi32_mask(bits, magnitude);
    for (unsigned m = subnormal; m != 0; m &= m - 1) {
      const auto k = static_cast<std::int64_t>(__builtin_ctz(m));
      h[i + k] = float_to_bf16(f[i + k]);
    }
  }
  for (; i < n; ++i) h[i] = float_to_bf16(f[i]);
}

bool has_avx512_bf16() {
  static const bool yes = __builtin_cpu_supports("avx512bf16") != 0;
  return yes;
}

// F16C is part of x86-64-v3: with KILN_CPU_ISA at a lower level (the suites
// run each one) the portable conversions run, and stay tested.
bool has_f16c() {
  static const bool yes = active_isa() >= Isa::kX86V3 && __builtin_cpu_supports("f16c") != 0;
  return yes;
}

__attribute__((target("avx,f16c"))) void widen_f16c(const std::uint16_t* h, float* f,
                                                      std::int64_t n) {
  std::int64_t i = 0;
  const __m128i magnitude = _mm_set1_epi16(0x7fff);
  const __m128i inf = _mm_set1_epi16(0x7c00);
  for (; i + 8 <= n; i += 8) {
    const __m128i w = _mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i));
    _mm256_storeu_ps(f + i, _mm256_cvtph_ps(w));
    if (_mm_movemask_epi8(_mm_cmpgt_epi16(_mm_and_si128(w, magnitude), inf)) != 0) {
      for (std::int64_t k = i; k < i + 8; ++k) f[k] = half_to_float(h[k]);  // NaN lanes
    }
  }
  for (; i < n; ++i) f[i] = half_to_float(h[i]);
}

__attribute__((target("avx,f16c"))) void narrow_f16c(const float* f, std::uint16_t* h,
                                                       std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(f + i);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(h + i),
                     _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)) != 0) {
      for (std::int64_t k = i; k < i + 8; ++k) h[k] = float_to_half(f[k]);  // NaN lanes
    }
  }
  for (; i < n; ++i) h[i] = float_to_half(f[i]);
}
#endif

// n words of 16-bit float dtype `from` to floats (exact).
void widen_to_f32(DType from, const std::uint16_t* h, float* f, std::int64_t n) {
  if (from == DType::kBF16) return widen_words<bf16_to_float>(h, f, n);
#ifdef KILN_X86_INTRINSICS
  if (has_f16c()) return widen_f16c(h, f, n);
#endif
  widen_words<half_to_float>(h, f, n);
}

// n floats rounded to 16-bit float dtype `to` (nearest even).
void narrow_from_f32(DType to, const float* f, std::uint16_t* h, std::int64_t n) {
  if (to == DType::kBF16) {
#ifdef KILN_X86_INTRINSICS
    if (has_avx512_bf16()) return narrow_bf16_avx512(f, h, n);
#endif
    return narrow_words<float_to_bf16>(f, h, n);
  }
#ifdef KILN_X86_INTRINSICS
  if (has_f16c()) return narrow_f16c(f, h, n);
#endif
  narrow_words<float_to_half>(f, h, n);
}

Array widen(const Array& a) {
  auto buf = HostBuffer::allocate(static_cast<std::size_t>(a.size()) * sizeof(float));
  widen_to_f32(a.dtype(), static_cast<const std::uint16_t*>(a.buffer()->host_data()),
               static_cast<float*>(buf->host_data()), a.size());
  return Array(DType::kF32, a.shape(), std::move(buf));
}

std::shared_ptr<Buffer> narrow(const std::shared_ptr<Buffer>& wide, std::int64_t n, DType to) {
  auto buf = HostBuffer::allocate(static_cast<std::size_t>(n) * sizeof(std::uint16_t));
  narrow_from_f32(to, static_cast<const float*>(wide->host_data()),
                  static_cast<std::uint16_t*>(buf->host_data()), n);
  return buf;
}

// The fused interpreter's astype kernels between a 16-bit float and f32 (an
// operand may be one element for all n).
template <DType From>
void widen_flat(const FlatOperand* in, void* out, std::size_t n) {
  const auto* h = static_cast<const std::uint16_t*>(in[0].data);
  auto* f = static_cast<float*>(out);
  if (!in[0].scalar) return widen_to_f32(From, h, f, static_cast<std::int64_t>(n));
  float x = 0;
  widen_to_f32(From, h, &x, 1);
  std::fill(f, f + n, x);
}
template <DType To>
void narrow_flat(const FlatOperand* in, void* out, std::size_t n) {
  const auto* f = static_cast<const float*>(in[0].data);
  auto* h = static_cast<std::uint16_t*>(out);
  if (!in[0].scalar) return narrow_from_f32(To, f, h, static_cast<std::int64_t>(n));
  std::uint16_t x = 0;
  narrow_from_f32(To, f, &x, 1);
  std::fill(h, h + n, x);
}

bool any_16bit_float(std::span<const Array> inputs, DType out) {
  return is_16bit_float(out) || std::any_of(inputs.begin(), inputs.end(), [](const Array& a) {
           return is_16bit_float(a.dtype());
         });
}

}  // namespace

bool computes_in_f32(Prim p, std::span<const Array> inputs, const Aval& out) {
  switch (family(p)) {
    case PrimFamily::kIdentity: case PrimFamily::kLayout: case PrimFamily::kControl:
      return false;  // no arithmetic: 16-bit words move as they are
    case PrimFamily::kUnary: case PrimFamily::kBinary: case PrimFamily::kWhere:
    case PrimFamily::kAstype: case PrimFamily::kReduce: case PrimFamily::kArgReduce:
    case PrimFamily::kScan: case PrimFamily::kSort: case PrimFamily::kMatmul:
    case PrimFamily::kIndex: case PrimFamily::kCreation:
      return any_16bit_float(inputs, out.dtype);
    case PrimFamily::kWindow:  // unfold moves words (window.cpp); fold adds
      return p != Prim::kUnfold && any_16bit_float(inputs, out.dtype);
  }
  return false;
}

std::shared_ptr<Buffer> eval_in_f32(Backend& backend, Prim p, const Params& params,
                                    std::span<const Array> inputs, const Aval& out) {
  std::vector<Array> wide;
  wide.reserve(inputs.size());
  for (const Array& a : inputs) wide.push_back(is_16bit_float(a.dtype()) ? widen(a) : a);
  if (!is_16bit_float(out.dtype)) return backend.eval(p, params, wide, out);
  const Aval wide_out{DType::kF32, out.shape};
  return narrow(backend.eval(p, params, wide, wide_out), numel(out.shape), out.dtype);
}

FlatKernel half_astype_kernel(DType in, DType out) {
  if (out == DType::kF32 && in == DType::kF16) return widen_flat<DType::kF16>;
  if (out == DType::kF32 && in == DType::kBF16) return widen_flat<DType::kBF16>;
  if (in == DType::kF32 && out == DType::kF16) return narrow_flat<DType::kF16>;
  if (in == DType::kF32 && out == DType::kBF16) return narrow_flat<DType::kBF16>;
  return nullptr;
}

FusedKernel computed_in_f32(const FusedKernel& k) {
  FusedKernel w;
  w.kind = k.kind;
  w.shape = k.shape;
  const Program& a = k.body;
  Program& b = w.body;
  b = a;
  b.equations.clear();
  const auto f32_aval = [&](ValueId v) { return Aval{DType::kF32, a.avals[v].shape}; };
  const auto astype_eq = [](ValueId from, ValueId to, DType dtype) {
    return Equation{Prim::kAstype, Params(DTypeParams{dtype}), {from}, to};
  };
  // The f32 copy of each 16-bit float value, made where it is first read.
  std::vector<ValueId> wide(a.num_values(), -1);
  const auto f32_of = [&](ValueId v) {
    if (!is_16bit_float(b.avals[v].dtype)) return v;
    if (wide[v] < 0) {
      wide[v] = b.new_value(f32_aval(v));
      b.equations.push_back(astype_eq(v, wide[v], DType::kF32));
    }
    return wide[v];
  };
  for (const Equation& eq : a.equations) {
    if (has_trait(eq.prim, PrimTrait::kAlias)) {  // the words themselves
      b.equations.push_back(eq);
      continue;
    }
    Equation e = eq;
    for (ValueId& in : e.inputs) in = f32_of(in);
    const DType out = a.avals[eq.output].dtype;
    if (!is_16bit_float(out)) {
      b.equations.push_back(std::move(e));
      continue;
    }
    // Computed in f32, then rounded into the 16-bit value itself.
    e.output = b.new_value(f32_aval(eq.output));
    if (e.prim == Prim::kAstype) e.params = Params(DTypeParams{DType::kF32});
    const ValueId computed = e.output;
    b.equations.push_back(std::move(e));
    b.equations.push_back(astype_eq(computed, eq.output, out));
  }
  return w;
}

bool has_16bit_float(const FusedKernel& k) {
  return std::any_of(k.body.avals.begin(), k.body.avals.end(),
                     [](const Aval& a) { return is_16bit_float(a.dtype); });
}

}  // namespace kiln::cpu
