// The code generator's plan (jit_schedule.hpp): which ops have instructions of
// their own, which are calls of a flat kernel, and the linear scan that gives
// every value a register.
#include "kiln/backends/cpu/jit_schedule.hpp"

#include <cstddef>

#include "kiln/backends/cpu/simd.hpp"

namespace kiln::cpu::jit_detail {
namespace {

bool is_bool(const Aval& a) { return a.dtype == DType::kBool; }
bool four_bytes(const Aval& a) { return size_of(a.dtype) == 4; }

// The constants an op with instructions of its own needs.
void constants_of(const Program& b, const Equation& eq, bool* needs) {
  const auto need = [&](Const c) { needs[static_cast<int>(c)] = true; };
  const DType in = b.avals[eq.inputs[0]].dtype, out = b.avals[eq.output].dtype;
  switch (eq.prim) {
    case Prim::kNeg: return need(Const::kSign);
    case Prim::kAbs: return need(Const::kAbs);
    case Prim::kRelu: return need(Const::kZero);
    case Prim::kRsqrt: return need(Const::kOne);
    case Prim::kLogicalNot: return need(Const::kOnes);
    case Prim::kNe:
    case Prim::kLe:
    case Prim::kGe:  // i32 on AVX2: the complement of ==, >, <
      if (in != DType::kF32) need(Const::kOnes);
      return;
    case Prim::kAstype:
      if (in == DType::kF32 && out == DType::kI32) {
        need(Const::kTwo31);
        need(Const::kAbs);
      }
      if (in == DType::kBool && out == DType::kF32) need(Const::kOne);
      if (out == DType::kBool) {
        need(Const::kZero);
        need(Const::kOnes);
      }
      return;
    default: return;
  }
}

// astype pairs with exact instructions of their own (jit.cpp).
bool inline_astype(DType from, DType to) {
  using enum DType;
  return (from == kF32 && to == kI32) || (from == kI32 && to == kF32) ||
         (from == kBool && (to == kF32 || to == kI32)) ||
         (to == kBool && (from == kF32 || from == kI32)) || (from == kI32 && to == kU32) ||
         (from == kU32 && to == kI32);
}

}  // namespace

// Exact ops have instructions of their own here; any other elementwise op on
// 4-byte or bool lanes whose flat kernel is one of the active level's SIMD
// kernels (simd_kernels.cpp: their last partial batch runs padded, so a lane's
// value does not depend on its position or on the other lanes) is a call of
// that very kernel on one vector, giving the unfused bits by construction. The
// generic kernels (elementwise.cpp: xtensor runs aligned SIMD batches and
// scalar ends, which differ in the last bit for the math functions) are not
// called: their bits depend on where a lane falls in a run.
JitOp op_kind(Prim p, const DType* in, std::size_t arity, DType out) {
  const auto four = [](DType d) { return size_of(d) == 4; };
  const auto lanes = [&](DType d) { return four(d) || d == DType::kBool; };
  const auto all = [&](DType d) {
    for (std::size_t i = 0; i < arity; ++i) {
      if (in[i] != d) return false;
    }
    return true;
  };
  if (arity == 0) return JitOp::kNone;
  switch (p) {
    case Prim::kStopGradient:
    case Prim::kReshape:
      if (out != in[0]) return JitOp::kNone;
      [[fallthrough]];
    case Prim::kBitcast:
      return (four(in[0]) && four(out)) || (in[0] == DType::kBool && out == DType::kBool)
                 ? JitOp::kInline
                 : JitOp::kNone;
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
    case Prim::kRsqrt:
      if (all(DType::kF32) && out == DType::kF32) return JitOp::kInline;
      break;
    case Prim::kEq:
    case Prim::kNe:
    case Prim::kLt:
    case Prim::kLe:
    case Prim::kGt:
    case Prim::kGe:
      if (all(DType::kF32) && out == DType::kBool) return JitOp::kInline;
      break;
    case Prim::kLogicalAnd:
    case Prim::kLogicalOr:
    case Prim::kLogicalNot:
      if (all(DType::kBool) && out == DType::kBool) return JitOp::kInline;
      break;
    case Prim::kAstype:
      if (inline_astype(in[0], out)) return JitOp::kInline;
      break;
    case Prim::kWhere:
      return arity == 3 && in[0] == DType::kBool && in[1] == out && in[2] == out && lanes(out)
                 ? JitOp::kInline
                 : JitOp::kNone;
    default: break;
  }
  // i32/u32 lanes: wrapping add, subtract, multiply and bitwise ops; signed
  // comparisons (exact, whatever instructions).
  const bool ints = all(DType::kI32) || all(DType::kU32);
  switch (p) {
    case Prim::kAdd:
    case Prim::kSub:
    case Prim::kMul:
    case Prim::kBitwiseAnd:
    case Prim::kBitwiseOr:
    case Prim::kBitwiseXor:
      if (ints && out == in[0]) return JitOp::kInline;
      break;
    case Prim::kEq:
    case Prim::kNe:
    case Prim::kLt:
    case Prim::kLe:
    case Prim::kGt:
    case Prim::kGe:
      if (all(DType::kI32) && out == DType::kBool) return JitOp::kInline;
      break;
    default: break;
  }
  const PrimFamily f = family(p);
  if (f != PrimFamily::kUnary && f != PrimFamily::kBinary && f != PrimFamily::kAstype) {
    return JitOp::kNone;
  }
  if (has_trait(p, PrimTrait::kAlias) || !lanes(out)) return JitOp::kNone;
  for (std::size_t i = 0; i < arity; ++i) {
    if (!lanes(in[i]) || in[i] != in[0]) return JitOp::kNone;
  }
  // the result dtype the op gives (kernels are looked up by operand dtype)
  if (f != PrimFamily::kAstype &&
      out != (has_trait(p, PrimTrait::kComparison) ? DType::kBool : in[0])) {
    return JitOp::kNone;
  }
  return simd_kernel(p, in[0], out) != nullptr ? JitOp::kCall : JitOp::kNone;
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
  std::vector<FlatKernel> call(b.equations.size(), nullptr);
  std::vector<const void*> vector(b.equations.size(), nullptr);
  for (std::size_t i = 0; i < eqs.size(); ++i) {
    const Equation& eq = b.equations[eqs[i]];
    DType dts[3] = {};
    if (eq.inputs.size() > 3) return false;
    for (std::size_t j = 0; j < eq.inputs.size(); ++j) dts[j] = b.avals[eq.inputs[j]].dtype;
    const DType out = b.avals[eq.output].dtype;
    const JitOp how = op_kind(eq.prim, dts, eq.inputs.size(), out);
    if (how == JitOp::kNone) return false;
    if (how == JitOp::kCall) {
      // the vector function the SIMD kernel itself calls, else that kernel
      // (fused.cpp's resolution)
      vector[eqs[i]] = simd_vector_kernel(eq.prim, dts[0], out);
      if (vector[eqs[i]] == nullptr) call[eqs[i]] = flat_kernel(eq.prim, dts[0], out);
      s.calls = true;
    }
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
      if (how == JitOp::kInline) constants_of(b, eq, needs);
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
  s.fixed = next;
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
    a.call = call[eqs[i]];
    a.vector = vector[eqs[i]];
    for (ValueId in : eq.inputs) release(rep[in], static_cast<std::ptrdiff_t>(i));
    if (a.call != nullptr || a.vector != nullptr) {  // registers in use after it but its result
      a.live = registers >= 32 ? ~0u : (1u << registers) - 1;
      for (int r : free) a.live &= ~(1u << r);
      a.live &= ~(1u << a.dst);
    }
    s.actions.push_back(a);
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

}  // namespace kiln::cpu::jit_detail
