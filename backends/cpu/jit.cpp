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

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "kiln/backends/cpu/simd.hpp"

#if KILN_HAVE_XBYAK
#include <xbyak/xbyak.h>
#endif

namespace kiln::cpu {
namespace {

std::atomic<std::size_t> compiled{0};
std::atomic<std::int64_t> generate_ns{0};

#if KILN_HAVE_XBYAK

using Xbyak::Xmm;

enum class Const : std::uint8_t { kSign, kAbs, kZero, kOne, kOnes, kCount };
constexpr std::uint32_t kConstBits[] = {0x80000000u, 0x7fffffffu, 0u, 0x3f800000u, 0xffffffffu};

// What the loop does, in order, with the registers the linear scan gave.
struct Action {
  enum Kind : std::uint8_t { kLoad, kOp, kStore } kind;
  std::size_t eq = 0;         // kOp: the equation
  int index = 0;              // kLoad: operand number; kStore: output number
  bool boolean = false;       // kLoad/kStore: 0/1 bytes
  int dst = -1;               // kLoad/kOp: the register written
  int src[3] = {-1, -1, -1};  // kOp: operands' registers; kStore: src[0]
};

struct Schedule {
  std::vector<Action> actions;
  std::vector<ValueId> operands;  // leaves, in pointer order
  std::vector<bool> broadcast;    // per operand
  std::vector<int> pinned;        // per broadcast operand: its register, else -1
  int constant[static_cast<int>(Const::kCount)] = {-1, -1, -1, -1, -1};
  std::vector<bool> out_bool;  // per output
};

bool is_bool(const Aval& a) { return a.dtype == DType::kBool; }
bool four_bytes(const Aval& a) { return size_of(a.dtype) == 4; }

// The constant an op needs, or kCount.
Const constant_of(Prim p) {
  switch (p) {
    case Prim::kNeg: return Const::kSign;
    case Prim::kAbs: return Const::kAbs;
    case Prim::kRelu: return Const::kZero;
    case Prim::kRsqrt: return Const::kOne;
    case Prim::kLogicalNot: return Const::kOnes;
    default: return Const::kCount;
  }
}

// Whether `eq` has exact code here (operand and result dtypes included).
bool supported(const Program& b, const Equation& eq) {
  const Aval& out = b.avals[eq.output];
  const auto in = [&](std::size_t i) { return b.avals[eq.inputs[i]]; };
  const auto all_f32 = [&] {
    for (ValueId v : eq.inputs) {
      if (b.avals[v].dtype != DType::kF32) return false;
    }
    return true;
  };
  switch (eq.prim) {
    case Prim::kBitcast:
    case Prim::kStopGradient:
    case Prim::kReshape:
      return (four_bytes(in(0)) && four_bytes(out)) || (is_bool(in(0)) && is_bool(out));
    case Prim::kAdd:
    case Prim::kSub:
    case Prim::kMul:
    case Prim::kDiv:
    case Prim::kMaximum:
    case Prim::kMinimum:
    case Prim::kNeg:
    case Prim::kAbs:
    case Prim::kRelu:
    case Prim::kSqrt:
    case Prim::kRsqrt: return all_f32() && out.dtype == DType::kF32;
    case Prim::kEq:
    case Prim::kNe:
    case Prim::kLt:
    case Prim::kLe:
    case Prim::kGt:
    case Prim::kGe: return all_f32() && is_bool(out);
    case Prim::kLogicalAnd:
    case Prim::kLogicalOr:
    case Prim::kLogicalNot:
      for (ValueId v : eq.inputs) {
        if (!is_bool(b.avals[v])) return false;
      }
      return is_bool(out);
    case Prim::kWhere:
      return is_bool(in(0)) && in(1).dtype == out.dtype && in(2).dtype == out.dtype &&
             (four_bytes(out) || is_bool(out));
    default: return false;
  }
}

// Plans the loop: leaves, register per value, actions. False when the body is
// not supported or registers run out.
bool schedule(const Program& b, const std::vector<std::size_t>& eqs,
              const std::vector<ValueId>& outputs, const std::vector<JitLeaf>& leaf, int registers,
              Schedule& s) {
  const std::size_t nv = b.num_values();
  std::vector<ValueId> rep(nv);
  for (std::size_t v = 0; v < nv; ++v) rep[v] = static_cast<ValueId>(v);
  std::vector<bool> computed(nv, false);
  std::vector<int> operand_of(nv, -1);
  constexpr std::ptrdiff_t kNever = -1;
  std::vector<std::ptrdiff_t> last_use(nv, kNever);
  const auto end = static_cast<std::ptrdiff_t>(eqs.size());
  bool needs[static_cast<int>(Const::kCount)] = {};
  for (std::size_t i = 0; i < eqs.size(); ++i) {
    const Equation& eq = b.equations[eqs[i]];
    if (!supported(b, eq)) return false;
    for (ValueId in : eq.inputs) {
      const ValueId r = rep[in];
      last_use[r] = static_cast<std::ptrdiff_t>(i);
      if (computed[r] || operand_of[r] >= 0) continue;
      const JitLeaf kind = leaf[r];
      if (kind == JitLeaf::kNone) return false;
      if (!four_bytes(b.avals[r]) && !is_bool(b.avals[r])) return false;
      operand_of[r] = static_cast<int>(s.operands.size());
      s.operands.push_back(r);
      s.broadcast.push_back(kind == JitLeaf::kBroadcast);
    }
    if (has_trait(eq.prim, PrimTrait::kAlias)) {
      rep[eq.output] = rep[eq.inputs[0]];
    } else {
      computed[eq.output] = true;
      const Const c = constant_of(eq.prim);
      if (c != Const::kCount) needs[static_cast<int>(c)] = true;
    }
  }
  for (ValueId v : outputs) {
    if (!computed[rep[v]] && operand_of[rep[v]] < 0) return false;
    last_use[rep[v]] = end;
    s.out_bool.push_back(is_bool(b.avals[v]));
  }
  // Whole-call registers: constants, then broadcast operands.
  int next = 0;
  for (int c = 0; c < static_cast<int>(Const::kCount); ++c) {
    if (needs[c]) s.constant[c] = next++;
  }
  std::vector<int> reg(nv, -1);
  s.pinned.assign(s.operands.size(), -1);
  for (std::size_t k = 0; k < s.operands.size(); ++k) {
    if (s.broadcast[k]) reg[s.operands[k]] = s.pinned[k] = next++;
  }
  if (next > registers) return false;
  std::vector<int> free;
  for (int r = registers; r-- > next;) free.push_back(r);
  const auto take = [&](int& r) {
    if (free.empty()) return false;
    r = free.back();
    free.pop_back();
    return true;
  };
  const auto ensure = [&](ValueId r) {  // a run operand is loaded at first use
    if (reg[r] >= 0) return true;
    const int k = operand_of[r];
    Action a{Action::kLoad};
    a.index = k;
    a.boolean = is_bool(b.avals[r]);
    if (!take(a.dst)) return false;
    reg[r] = a.dst;
    s.actions.push_back(a);
    return true;
  };
  const auto release = [&](ValueId r, std::ptrdiff_t at) {
    if (last_use[r] != at || reg[r] < 0) return;
    const int o = operand_of[r];
    if (o >= 0 && s.broadcast[static_cast<std::size_t>(o)]) return;
    free.push_back(reg[r]);
    last_use[r] = kNever;  // freed once even when read twice
  };
  for (std::size_t i = 0; i < eqs.size(); ++i) {
    const Equation& eq = b.equations[eqs[i]];
    if (has_trait(eq.prim, PrimTrait::kAlias)) continue;
    Action a{Action::kOp};
    a.eq = eqs[i];
    for (std::size_t j = 0; j < eq.inputs.size(); ++j) {
      if (!ensure(rep[eq.inputs[j]])) return false;
      a.src[j] = reg[rep[eq.inputs[j]]];
    }
    if (!take(a.dst)) return false;
    reg[eq.output] = a.dst;
    s.actions.push_back(a);
    for (ValueId in : eq.inputs) release(rep[in], static_cast<std::ptrdiff_t>(i));
    if (last_use[eq.output] == kNever) free.push_back(a.dst);  // never read
  }
  // Every load before the first store (an output may overwrite an input).
  for (ValueId v : outputs) {
    if (!ensure(rep[v])) return false;
  }
  for (std::size_t o = 0; o < outputs.size(); ++o) {
    Action a{Action::kStore};
    a.index = static_cast<int>(o);
    a.boolean = s.out_bool[o];
    a.src[0] = reg[rep[outputs[o]]];
    s.actions.push_back(a);
  }
  return true;
}

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

class Generator : public Xbyak::CodeGenerator {
 public:
  enum class Mode : std::uint8_t { kFull, kMasked, kScalar };

  Generator(const Program& b, const Schedule& s, bool avx512)
      : Xbyak::CodeGenerator(1 << 16, Xbyak::DontSetProtectRWE), b_(b), s_(s), wide_(avx512) {}

  // False when there are more pointers than registers for them.
  bool generate() {
    using namespace Xbyak;
    // rdi: operands, rsi: outputs, rdx: n, rcx: the element index, rax scratch.
    const Reg64 pool[] = {r8, r9, r10, r11, rbx, rbp, r12, r13, r14, r15};
    std::size_t used = 0;
    for (std::size_t k = 0; k < s_.operands.size(); ++k) {
      if (s_.broadcast[k]) continue;
      if (used == std::size(pool)) return false;
      operand_ptr_.resize(k + 1, rax);
      operand_ptr_[k] = pool[used++];
    }
    for (std::size_t o = 0; o < s_.out_bool.size(); ++o) {
      if (used == std::size(pool)) return false;
      output_ptr_.push_back(pool[used++]);
    }
    const Reg64 saved[] = {rbx, rbp, r12, r13, r14, r15};
    for (const Reg64& r : saved) push(r);
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

  void load(const Action& a, Mode m) {
    const Xbyak::Reg64& p = operand_ptr_[static_cast<std::size_t>(a.index)];
    const Xmm d = vec(a.dst, m);
    if (!a.boolean) {
      const Xbyak::Address at = ptr[p + rcx * 4];
      if (m == Mode::kScalar) return vmovss(d, dword[p + rcx * 4]);
      if (m == Mode::kMasked) return vmovups(d | k2 | T_z, at);
      return vmovups(d, at);
    }
    if (m == Mode::kScalar) {
      byte_to_mask(byte[p + rcx]);
      return vmovd(d, eax);
    }
    if (wide_) {
      if (m == Mode::kMasked) {  // a plain masked load: no fault past n
        vmovdqu8(Xbyak::Xmm(a.dst) | k2 | T_z, ptr[p + rcx]);
        vpmovzxbd(d, Xbyak::Xmm(a.dst));
      } else {
        vpmovzxbd(d, ptr[p + rcx]);
      }
      vptestmd(k1, d, d);
      return vpmovm2d(d, k1);
    }
    vpmovzxbd(d, ptr[p + rcx]);
    vpxor(ymm15, ymm15, ymm15);
    vpcmpgtd(d, d, ymm15);  // bytes are 0..255: greater than 0 is nonzero
  }

  void store(const Action& a, Mode m) {
    const Xbyak::Reg64& p = output_ptr_[static_cast<std::size_t>(a.index)];
    const Xmm v = vec(a.src[0], m);
    if (!a.boolean) {
      if (m == Mode::kScalar) return vmovss(dword[p + rcx * 4], v);
      if (m == Mode::kMasked) return vmovups(ptr[p + rcx * 4] | k2, v);
      return vmovups(ptr[p + rcx * 4], v);
    }
    if (m == Mode::kScalar) {
      vmovd(eax, v);
      and_(eax, 1);
      return mov(byte[p + rcx], al);
    }
    if (wide_) {
      vpsrld(zmm31, v, 31);
      if (m == Mode::kFull) return vpmovdb(ptr[p + rcx], zmm31);
      vpmovdb(xmm31, zmm31);  // then a plain masked store: nothing past n
      return vmovdqu8(ptr[p + rcx] | k2, xmm31);
    }
    vpsrld(ymm15, v, 31);
    vextracti128(xmm14, ymm15, 1);
    vpackusdw(xmm15, xmm15, xmm14);
    vpackuswb(xmm15, xmm15, xmm15);
    vmovq(qword[p + rcx], xmm15);
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

  void op(const Action& a, Mode m) {
    const Equation& eq = b_.equations[a.eq];
    const Xmm d = vec(a.dst, m), x = vec(a.src[0], m);
    const auto y = [&] { return vec(a.src[1], m); };
    const auto c = [&](Const k) { return vec(s_.constant[static_cast<int>(k)], m); };
    switch (eq.prim) {
      case Prim::kAdd: return vaddps(d, x, y());
      case Prim::kSub: return vsubps(d, x, y());
      case Prim::kMul: return vmulps(d, x, y());
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
      default:  // comparisons (supported() let nothing else through)
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
};

#endif  // KILN_HAVE_XBYAK

}  // namespace

bool jit_available() {
#if KILN_HAVE_XBYAK
  const char* env = std::getenv("KILN_CPU_JIT");
  if (env != nullptr && std::strcmp(env, "0") == 0) return false;
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

std::size_t jit_bodies_compiled() { return compiled.load(std::memory_order_relaxed); }
double jit_generate_ms_total() {
  return static_cast<double>(generate_ns.load(std::memory_order_relaxed)) * 1e-6;
}

}  // namespace kiln::cpu
