// The fused-body code generator (jit.hpp). The generated function:
//
//   for each full vector of lanes (16 f32 in a zmm, 8 in a ymm):
//     load the run operands at first use, compute each equation into a register
//     of its own, then store every output (after all loads: an output written
//     over an input's buffer never feeds a later read of the same vector);
//   the last n % lanes elements the same way, through k-masked loads and stores
//   on AVX-512 and one element at a time (xmm, scalar loads) on AVX2, so nothing
//   past n is read or written.
//
// Values: f32 (and other 4-byte lanes only moved) as themselves, bool as a
// lane-wide mask (all ones or zero), loaded from and stored as 0/1 bytes.
// Registers: linear scan over the body in order; broadcast operands and
// constants keep one for the whole call; a result never shares its operands'
// register, so a multi-instruction op may write it early. A body that needs more
// registers (or pointer registers) than there are is not compiled.
#include "kiln/backends/cpu/jit.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "kiln/backends/cpu/jit_schedule.hpp"
#include "kiln/backends/cpu/simd.hpp"
#include "kiln/runtime/env.hpp"

#if KILN_HAVE_XBYAK
#include <xbyak/xbyak.h>
#endif

namespace kiln::cpu {
namespace {

std::atomic<std::size_t> compiled{0};
std::atomic<std::int64_t> generate_ns{0};

#if KILN_HAVE_XBYAK

using Xbyak::Xmm;

using namespace jit_detail;

bool is_bool(const Aval& a) { return a.dtype == DType::kBool; }

// Comparison predicates as C++ evaluates them (ordered, except != unordered).
int predicate(Prim p) {
  switch (p) {
    case Prim::kEq: return 0x00;  // EQ_OQ
    case Prim::kNe: return 0x04;  // NEQ_UQ
    case Prim::kLt: return 0x11;  // LT_OQ
    case Prim::kLe: return 0x12;  // LE_OQ
    case Prim::kGt: return 0x1e;  // GT_OQ
    default: return 0x1d;         // GE_OQ
  }
}

// The frame of a body with calls (bytes from the aligned rsp): the callee's
// result slot, its operand slots, its FlatOperand array, the general registers
// kept across a call, the vector registers kept across it, the entry rsp.
constexpr int kOut = 0, kIn = 64, kOps = 256, kGprs = 320, kSpill = 384;
constexpr int kSavedRsp = kSpill + 32 * 64, kFrame = kSavedRsp + 64;
static_assert(sizeof(FlatOperand) == 16 && offsetof(FlatOperand, data) == 0 &&
              offsetof(FlatOperand, scalar) == 8);

// Room for the code: 64 KiB, or more with calls (each keeps up to 32 vector
// registers around it, in the full and the tail body). Code that does not fit
// throws, and the body is interpreted.
std::size_t code_bytes(const Schedule& s) {
  std::size_t n = std::size_t{1} << 14;
  for (const Action& a : s.actions) n += a.call != nullptr || a.vector != nullptr ? 4096 : 256;
  return std::max(n, std::size_t{1} << 16);
}

class Generator : public Xbyak::CodeGenerator {
 public:
  enum class Mode : std::uint8_t { kFull, kMasked, kScalar };

  Generator(const Program& b, const Schedule& s, bool avx512)
      : Xbyak::CodeGenerator(code_bytes(s), Xbyak::DontSetProtectRWE),
        b_(b),
        s_(s),
        wide_(avx512) {}

  // False when there are more pointers than registers for them.
  bool generate() {
    using namespace Xbyak;
    // rdi: operands, rsi: outputs, rdx: n, rcx: the element index, rax scratch.
    // With calls, the callee-saved registers first: they need no keeping.
    const Reg64 plain[] = {r8, r9, r10, r11, rbx, rbp, r12, r13, r14, r15};
    const Reg64 calling[] = {rbx, rbp, r12, r13, r14, r15, r8, r9, r10, r11};
    const Reg64* pool = s_.calls ? calling : plain;
    constexpr std::size_t kPool = std::size(plain);
    std::size_t used = 0;
    for (std::size_t k = 0; k < s_.operands.size(); ++k) {
      if (s_.broadcast[k]) continue;
      if (used == kPool) return false;
      operand_ptr_.resize(k + 1, rax);
      operand_ptr_[k] = pool[used++];
    }
    for (std::size_t o = 0; o < s_.out_bool.size(); ++o) {
      if (used == kPool) return false;
      output_ptr_.push_back(pool[used++]);
    }
    kept_ = {rcx, rdx};  // the index and n, and pointers in caller-saved registers
    for (std::size_t i = 0; i < used; ++i) {
      if (pool[i].getIdx() >= 8 && pool[i].getIdx() <= 11) kept_.push_back(pool[i]);
    }
    const Reg64 saved[] = {rbx, rbp, r12, r13, r14, r15};
    for (const Reg64& r : saved) push(r);
    if (s_.calls) {  // a 64-byte aligned frame; the entry rsp at its end
      mov(rax, rsp);
      sub(rsp, kFrame);
      and_(rsp, -64);
      mov(ptr[rsp + kSavedRsp], rax);
      for (int j = 0; j < 3; ++j) {  // FlatOperand j: {the in slot j, not scalar}
        lea(rax, ptr[rsp + kIn + 64 * j]);
        mov(ptr[rsp + kOps + 16 * j], rax);
        mov(qword[rsp + kOps + 16 * j + 8], 0);
      }
    }
    for (std::size_t k = 0; k < operand_ptr_.size(); ++k) {
      if (!s_.broadcast[k]) mov(operand_ptr_[k], ptr[rdi + 8 * k]);
    }
    for (std::size_t o = 0; o < output_ptr_.size(); ++o) mov(output_ptr_[o], ptr[rsi + 8 * o]);
    for (int c = 0; c < static_cast<int>(Const::kCount); ++c) {
      if (s_.constant[c] < 0) continue;
      mov(eax, kConstBits[c]);
      vmovd(Xmm(s_.constant[c]), eax);
      vpbroadcastd(vec(s_.constant[c], Mode::kFull), Xmm(s_.constant[c]));
    }
    for (std::size_t k = 0; k < s_.operands.size(); ++k) {
      if (!s_.broadcast[k]) continue;
      const int r = s_.pinned[k];
      mov(rax, ptr[rdi + 8 * k]);
      if (is_bool(b_.avals[s_.operands[k]])) {
        byte_to_mask(ptr[rax]);
        vmovd(Xmm(r), eax);
        vpbroadcastd(vec(r, Mode::kFull), Xmm(r));
      } else {
        vbroadcastss(vec(r, Mode::kFull), dword[rax]);
      }
    }
    // Constants and broadcast operands never change: kept once, restored after
    // each call.
    for (int r = 0; s_.calls && r < s_.fixed; ++r) {
      vmovaps(ptr[rsp + kSpill + 64 * r], vec(r, Mode::kFull));
    }
    const int lanes = wide_ ? 16 : 8;
    Label full, tail, done;
    xor_(ecx, ecx);
    L(full);
    lea(rax, ptr[rcx + lanes]);
    cmp(rax, rdx);
    ja(tail, T_NEAR);
    body(Mode::kFull);
    add(rcx, lanes);
    jmp(full, T_NEAR);
    L(tail);
    cmp(rcx, rdx);
    jae(done, T_NEAR);
    if (wide_) {  // k2: the n - rcx (< 16) elements left
      sub(rdx, rcx);
      mov(eax, -1);
      bzhi(eax, eax, edx);
      kmovw(k2, eax);
      body(Mode::kMasked);
    } else {
      body(Mode::kScalar);
      inc(rcx);
      jmp(tail, T_NEAR);
    }
    L(done);
    if (s_.calls) mov(rsp, ptr[rsp + kSavedRsp]);
    for (std::size_t i = std::size(saved); i-- > 0;) pop(saved[i]);
    vzeroupper();
    ret();
    return true;
  }

 private:
  Xmm vec(int r, Mode m) const {
    if (m == Mode::kScalar) return Xbyak::Xmm(r);
    if (wide_) return Xbyak::Zmm(r);
    return Xbyak::Ymm(r);
  }

  // eax = the byte at `a` as a mask: 0 or all ones.
  void byte_to_mask(const Xbyak::Address& a) {
    movzx(eax, a);
    test(eax, eax);
    setne(al);
    movzx(eax, al);
    neg(eax);
  }

  // Register r (mode m) from 4-byte lanes at `at`, or from 0/1 bytes there.
  void load_from(int r, bool boolean, Mode m, const Xbyak::RegExp& at) {
    const Xmm d = vec(r, m);
    if (!boolean) {
      if (m == Mode::kScalar) return vmovss(d, dword[at]);
      if (m == Mode::kMasked) return vmovups(d | k2 | T_z, ptr[at]);
      return vmovups(d, ptr[at]);
    }
    if (m == Mode::kScalar) {
      byte_to_mask(byte[at]);
      return vmovd(d, eax);
    }
    if (wide_) {
      if (m == Mode::kMasked) {  // a plain masked load: no fault past n
        vmovdqu8(Xbyak::Xmm(r) | k2 | T_z, ptr[at]);
        vpmovzxbd(d, Xbyak::Xmm(r));
      } else {
        vpmovzxbd(d, ptr[at]);
      }
      vptestmd(k1, d, d);
      return vpmovm2d(d, k1);
    }
    vpmovzxbd(d, ptr[at]);
    vpxor(ymm15, ymm15, ymm15);
    vpcmpgtd(d, d, ymm15);  // bytes are 0..255: greater than 0 is nonzero
  }

  // Register r (mode m) to 4-byte lanes at `at`, or to 0/1 bytes there.
  void store_to(int r, bool boolean, Mode m, const Xbyak::RegExp& at) {
    const Xmm v = vec(r, m);
    if (!boolean) {
      if (m == Mode::kScalar) return vmovss(dword[at], v);
      if (m == Mode::kMasked) return vmovups(ptr[at] | k2, v);
      return vmovups(ptr[at], v);
    }
    if (m == Mode::kScalar) {
      vmovd(eax, v);
      and_(eax, 1);
      return mov(byte[at], al);
    }
    if (wide_) {
      vpsrld(zmm31, v, 31);
      if (m == Mode::kFull) return vpmovdb(ptr[at], zmm31);
      vpmovdb(xmm31, zmm31);  // then a plain masked store: nothing past n
      return vmovdqu8(ptr[at] | k2, xmm31);
    }
    vpsrld(ymm15, v, 31);
    vextracti128(xmm14, ymm15, 1);
    vpackusdw(xmm15, xmm15, xmm14);
    vpackuswb(xmm15, xmm15, xmm15);
    vmovq(qword[at], xmm15);
  }

  void load(const Action& a, Mode m) {
    const Xbyak::Reg64& p = operand_ptr_[static_cast<std::size_t>(a.index)];
    load_from(a.dst, a.boolean, m, a.boolean ? p + rcx : p + rcx * 4);
  }

  void store(const Action& a, Mode m) {
    const Xbyak::Reg64& p = output_ptr_[static_cast<std::size_t>(a.index)];
    store_to(a.src[0], a.boolean, m, a.boolean ? p + rcx : p + rcx * 4);
  }

  // An op without instructions of its own: its vector function with the
  // operand and result in register 0, or its flat kernel on one vector (one
  // element in scalar mode) in the frame's slots. Every register is the
  // callee's to clobber (SysV): the live vector registers, the general ones
  // the loop uses and (masked) k2 are kept across the call.
  void call_op(const Action& a, Mode m) {
    using namespace Xbyak;
    const Equation& eq = b_.equations[a.eq];
    const Mode full = Mode::kFull;
    for (int r = s_.fixed; r < 32; ++r) {
      if ((a.live >> r & 1u) != 0) vmovaps(ptr[rsp + kSpill + 64 * r], vec(r, full));
    }
    if (a.vector != nullptr) {
      if (a.src[0] != 0) vmovaps(vec(0, full), vec(a.src[0], full));
    } else {
      for (std::size_t j = 0; j < eq.inputs.size(); ++j) {
        store_to(a.src[j], is_bool(b_.avals[eq.inputs[j]]), m,
                 RegExp(rsp) + static_cast<int>(kIn + 64 * j));
      }
      lea(rdi, ptr[rsp + kOps]);
      lea(rsi, ptr[rsp + kOut]);
    }
    for (std::size_t i = 0; i < kept_.size(); ++i) mov(ptr[rsp + kGprs + 8 * i], kept_[i]);
    if (a.vector == nullptr) mov(edx, m == Mode::kScalar ? 1 : (wide_ ? 16 : 8));
    mov(rax, a.vector != nullptr ? reinterpret_cast<std::uint64_t>(a.vector)
                                 : reinterpret_cast<std::uint64_t>(a.call));
    call(rax);
    for (std::size_t i = 0; i < kept_.size(); ++i) mov(kept_[i], ptr[rsp + kGprs + 8 * i]);
    if (m == Mode::kMasked) {  // k2 again from rdx = the elements left
      mov(eax, -1);
      bzhi(eax, eax, edx);
      kmovw(k2, eax);
    }
    if (a.vector != nullptr) {
      if (a.dst != 0) vmovaps(vec(a.dst, full), vec(0, full));
    } else {
      load_from(a.dst, is_bool(b_.avals[eq.output]), m, RegExp(rsp) + kOut);
    }
    for (int r = 0; r < 32; ++r) {
      if ((a.live >> r & 1u) != 0) vmovaps(vec(r, full), ptr[rsp + kSpill + 64 * r]);
    }
  }

  // d = x if x is NaN, else t (the max/min instruction's result).
  void keep_nan(const Xmm& d, const Xmm& x, Mode m) {
    if (wide_) {
      vcmpps(k1, x, x, 3);  // UNORD_Q
      return vmovaps(d | k1, x);
    }
    const Xmm t = vec(15, m);
    vcmpps(t, x, x, 3);
    vblendvps(d, d, x, t);
  }

  // astype (jit_schedule.cpp's inline_astype pairs), as simd_kernels.cpp's
  // convert(): f32 -> i32 truncates and saturates, NaN -> 0; to bool, nonzero
  // (and NaN) is true; i32 <-> u32 keeps the bits.
  void astype(const Xmm& d, const Xmm& x, DType from, DType to, Mode m) {
    const auto c = [&](Const k) { return vec(s_.constant[static_cast<int>(k)], m); };
    const Xmm t = vec(15, m);  // AVX2 scratch
    if (from == DType::kF32 && to == DType::kI32) {
      vcvttps2dq(d, x);  // 0x80000000 (INT_MIN) for NaN and out of range
      if (wide_) {
        vcmpps(k1, x, c(Const::kTwo31), 0x1d);  // x >= 2^31: INT_MAX
        vmovdqa32(d | k1, c(Const::kAbs));
        vcmpps(k1, x, x, 3);  // NaN: 0
        return vpxord(d | k1, d, d);
      }
      vcmpps(t, x, c(Const::kTwo31), 0x1d);
      vblendvps(d, d, c(Const::kAbs), t);
      vcmpps(t, x, x, 7);  // ORD_Q: NaN lanes to 0
      return vandps(d, d, t);
    }
    if (from == DType::kI32 && to == DType::kF32) return vcvtdq2ps(d, x);
    if (from == DType::kBool && to == DType::kF32) {
      return wide_ ? vpandd(d, x, c(Const::kOne)) : vandps(d, x, c(Const::kOne));
    }
    if (from == DType::kBool) return vpsrld(d, x, 31);  // -> i32 1
    if (to == DType::kBool && from == DType::kF32) {
      if (wide_) {
        vcmpps(k1, x, c(Const::kZero), 4);  // NEQ_UQ
        return vpmovm2d(d, k1);
      }
      return vcmpps(d, x, c(Const::kZero), 4);
    }
    if (to == DType::kBool) {  // from i32
      if (wide_) {
        vptestmd(k1, x, x);
        return vpmovm2d(d, k1);
      }
      vpcmpeqd(d, x, c(Const::kZero));
      return vpxor(d, d, c(Const::kOnes));
    }
    vmovaps(d, x);  // i32 <-> u32
  }

  // A signed i32 comparison as a lane mask.
  void compare_i32(const Xmm& d, const Xmm& x, const Xmm& y, Prim p, Mode m) {
    if (wide_) {  // vpcmpd: 0 eq, 1 lt, 2 le, 4 ne, 5 ge, 6 gt
      const std::uint8_t imm = p == Prim::kEq ? 0 : p == Prim::kLt ? 1 : p == Prim::kLe ? 2
                               : p == Prim::kNe ? 4 : p == Prim::kGe ? 5 : 6;
      vpcmpd(k1, x, y, imm);
      return vpmovm2d(d, k1);
    }
    const Xmm ones = vec(s_.constant[static_cast<int>(Const::kOnes)], m);
    switch (p) {
      case Prim::kEq: return vpcmpeqd(d, x, y);
      case Prim::kGt: return vpcmpgtd(d, x, y);
      case Prim::kLt: return vpcmpgtd(d, y, x);
      case Prim::kNe: vpcmpeqd(d, x, y); break;
      case Prim::kLe: vpcmpgtd(d, x, y); break;
      default: vpcmpgtd(d, y, x); break;  // ge: not lt
    }
    vpxor(d, d, ones);
  }

  void op(const Action& a, Mode m) {
    if (a.call != nullptr || a.vector != nullptr) return call_op(a, m);
    const Equation& eq = b_.equations[a.eq];
    const Xmm d = vec(a.dst, m), x = vec(a.src[0], m);
    const auto y = [&] { return vec(a.src[1], m); };
    const auto c = [&](Const k) { return vec(s_.constant[static_cast<int>(k)], m); };
    const DType in = b_.avals[eq.inputs[0]].dtype;
    const bool integer = in == DType::kI32 || in == DType::kU32;
    switch (eq.prim) {
      case Prim::kAdd: return integer ? vpaddd(d, x, y()) : vaddps(d, x, y());
      case Prim::kSub: return integer ? vpsubd(d, x, y()) : vsubps(d, x, y());
      case Prim::kMul: return integer ? vpmulld(d, x, y()) : vmulps(d, x, y());
      case Prim::kBitwiseAnd: return wide_ ? vpandd(d, x, y()) : vpand(d, x, y());
      case Prim::kBitwiseOr: return wide_ ? vpord(d, x, y()) : vpor(d, x, y());
      case Prim::kBitwiseXor: return wide_ ? vpxord(d, x, y()) : vpxor(d, x, y());
      case Prim::kAstype: return astype(d, x, in, b_.avals[eq.output].dtype, m);
      case Prim::kDiv: return vdivps(d, x, y());
      case Prim::kMaximum: vmaxps(d, x, y()); return keep_nan(d, x, m);
      case Prim::kMinimum: vminps(d, x, y()); return keep_nan(d, x, m);
      case Prim::kRelu: vmaxps(d, x, c(Const::kZero)); return keep_nan(d, x, m);
      case Prim::kSqrt: return vsqrtps(d, x);
      case Prim::kRsqrt: vsqrtps(d, x); return vdivps(d, c(Const::kOne), d);
      case Prim::kNeg: return wide_ ? vpxord(d, x, c(Const::kSign)) : vxorps(d, x, c(Const::kSign));
      case Prim::kAbs: return wide_ ? vpandd(d, x, c(Const::kAbs)) : vandps(d, x, c(Const::kAbs));
      case Prim::kLogicalNot:
        return wide_ ? vpxord(d, x, c(Const::kOnes)) : vxorps(d, x, c(Const::kOnes));
      case Prim::kLogicalAnd: return wide_ ? vpandd(d, x, y()) : vandps(d, x, y());
      case Prim::kLogicalOr: return wide_ ? vpord(d, x, y()) : vorps(d, x, y());
      case Prim::kWhere:
        if (wide_) {
          vpmovd2m(k1, x);
          return vblendmps(d | k1, vec(a.src[2], m), y());
        }
        return vblendvps(d, vec(a.src[2], m), y(), x);
      default:  // comparisons (op_kind() let nothing else through)
        if (integer) return compare_i32(d, x, y(), eq.prim, m);
        if (wide_) {
          vcmpps(k1, x, y(), static_cast<std::uint8_t>(predicate(eq.prim)));
          return vpmovm2d(d, k1);
        }
        return vcmpps(d, x, y(), static_cast<std::uint8_t>(predicate(eq.prim)));
    }
  }

  void body(Mode m) {
    for (const Action& a : s_.actions) {
      switch (a.kind) {
        case Action::kLoad: load(a, m); break;
        case Action::kOp: op(a, m); break;
        case Action::kStore: store(a, m); break;
      }
    }
  }

  const Program& b_;
  const Schedule& s_;
  bool wide_;
  std::vector<Xbyak::Reg64> operand_ptr_;
  std::vector<Xbyak::Reg64> output_ptr_;
  std::vector<Xbyak::Reg64> kept_;  // general registers kept across a call
};

#endif  // KILN_HAVE_XBYAK

}  // namespace

bool jit_available() {
#if KILN_HAVE_XBYAK
  if (!detail::env::flag("KILN_CPU_JIT").value_or(true)) return false;
  const Isa isa = active_isa();
  return isa == Isa::kX86V3 || isa == Isa::kX86V4;
#else
  return false;
#endif
}

std::shared_ptr<const JitBody> jit_compile(const Program& body, const std::vector<std::size_t>& eqs,
                                           const std::vector<ValueId>& outputs,
                                           const std::vector<JitLeaf>& leaf) {
#if KILN_HAVE_XBYAK
  if (eqs.empty() || outputs.empty() || !jit_available()) return nullptr;
  const bool wide = active_isa() == Isa::kX86V4;
  const auto t0 = std::chrono::steady_clock::now();
  Schedule s;
  // Registers: zmm0-29 or ymm0-13; zmm30-31 / ymm14-15 are the ops' scratch.
  if (!schedule(body, eqs, outputs, leaf, wide ? 30 : 14, s)) return nullptr;
  try {
    auto gen = std::make_shared<Generator>(body, s, wide);
    if (!gen->generate()) return nullptr;
    gen->ready();
    gen->setProtectModeRE();  // written, now executable (never both at once)
    auto jit = std::make_shared<JitBody>();
    jit->fn = gen->getCode<JitFn>();
    jit->operands = s.operands;
    jit->code = std::move(gen);
    generate_ns.fetch_add(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
            .count(),
        std::memory_order_relaxed);
    compiled.fetch_add(1, std::memory_order_relaxed);
    return jit;
  } catch (const Xbyak::Error&) {  // code too long, or no executable memory: interpret
    return nullptr;
  }
#else
  (void)body, (void)eqs, (void)outputs, (void)leaf;
  return nullptr;
#endif
}

JitOp jit_op(Prim p, DType in, DType out) {
  if (!jit_available()) return JitOp::kNone;
  DType dts[3] = {in, in, in};
  std::size_t arity = 1;
  switch (family(p)) {
    case PrimFamily::kUnary:
    case PrimFamily::kAstype:
    case PrimFamily::kIdentity:
    case PrimFamily::kLayout: break;  // (reshape is the one layout alias)
    case PrimFamily::kBinary: arity = 2; break;
    case PrimFamily::kWhere:
      dts[0] = DType::kBool;
      arity = 3;
      break;
    default: return JitOp::kNone;
  }
  return jit_detail::op_kind(p, dts, arity, out);
}

std::size_t jit_bodies_compiled() { return compiled.load(std::memory_order_relaxed); }
double jit_generate_ms_total() {
  return static_cast<double>(generate_ns.load(std::memory_order_relaxed)) * 1e-6;
}

}  // namespace kiln::cpu
