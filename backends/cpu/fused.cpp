// CPU fused elementwise kernels (dsl/fusion.hpp): one pass over the iteration
// space in chunks of kChunk elements. Each chunk evaluates the body equation by
// equation with the flat kernels of elementwise.hpp (the unfused kernels' own
// definitions, SIMD through xtensor/xsimd), on chunk-local temporaries that stay
// in cache, so intermediates never go to memory.
//
// Where values live during a chunk:
// - inputs with the kernel's element count are read in place, 1-element inputs
//   as broadcast scalars, other broadcast inputs are gathered into a temporary
//   (broadcast indexing, a row copy or fill at a time);
// - equations whose inputs are all scalars are chunk-invariant: they run once,
//   before the first chunk, on one element;
// - a body output that is a fresh buffer is written in place by its equation; one
//   that goes `into` an input's buffer is computed into a temporary and copied
//   there after the chunk's last equation, when every input of that chunk has
//   been read;
// - bitcast and stop_gradient move no data: their value is their operand's
//   storage (copied only when it is a body output);
// - temporaries are recycled after their value's last reader (liveness over the
//   body), so a long chain such as threefry needs only a few.
#include <algorithm>
#include <cstring>

#include "kiln/backends/cpu/bits.hpp"
#include "kiln/backends/cpu/broadcast.hpp"
#include "kiln/backends/cpu/cpu_backend.hpp"
#include "kiln/backends/cpu/elementwise.hpp"
#include "kiln/dsl/fusion.hpp"

namespace kiln::cpu {
namespace {

// Elements per chunk: a temporary is at most 32 KiB (f64), and a handful of them
// stay in L2 while the body runs (1024 to 8192 measured alike on a 1M chain).
constexpr std::size_t kChunk = 4096;
constexpr std::size_t kSlotBytes = kChunk * 8;

enum class Loc : std::uint8_t {
  kInput,        // a full-size input, read in place
  kInputScalar,  // a 1-element input, read in place for every index
  kScalar,       // a chunk-invariant value computed once, in its own cell
  kSlot,    // a chunk temporary (gathered input or computed value)
  kOut,     // the chunk's part of a fresh output buffer
};

struct Place {
  Loc loc = Loc::kSlot;
  int index = -1;  // input, scalar, slot or output number
};

enum class Action : std::uint8_t { kCompute, kAlias, kCopy };

struct Gather {
  int input = -1;
  int slot = -1;
  BroadcastPlan<1> plan;
};

struct Plan {
  std::vector<Place> place;               // per body value
  std::vector<Action> action;             // per equation
  std::vector<std::size_t> hoisted;       // equations run once (all-scalar inputs)
  std::vector<std::size_t> per_chunk;     // equations run per chunk, in order
  std::vector<Gather> gathers;
  int slots = 0;
  int scalars = 0;
};

bool is_alias(Prim p) { return p == Prim::kBitcast || p == Prim::kStopGradient; }

// `out_of[v]`: the body output number of value v, or -1. `in_place[o]`: output o
// is written into an input's buffer.
Plan make_plan(const FusedKernel& k, std::span<const Array> inputs,
               const std::vector<int>& out_of, const std::vector<bool>& in_place) {
  const Program& b = k.body;
  const std::int64_t n = numel(k.shape);
  Plan plan;
  plan.place.resize(b.num_values());
  plan.action.assign(b.equations.size(), Action::kCompute);
  std::vector<bool> scalar(b.num_values(), false);
  std::vector<ValueId> root(b.num_values());  // the value whose storage v uses
  for (std::size_t v = 0; v < root.size(); ++v) root[v] = static_cast<ValueId>(v);
  for (std::size_t i = 0; i < b.inputs.size(); ++i) {
    const ValueId v = b.inputs[i];
    const std::int64_t m = inputs[i].size();
    if (m == n) {
      plan.place[v] = {Loc::kInput, static_cast<int>(i)};
    } else if (m == 1) {
      plan.place[v] = {Loc::kInputScalar, static_cast<int>(i)};
      scalar[v] = true;
    } else {
      plan.place[v] = {Loc::kSlot, -1};  // slot assigned below
      plan.gathers.push_back(
          Gather{static_cast<int>(i), -1,
                 BroadcastPlan<1>::make(k.shape, {&inputs[i].shape()})});
    }
  }
  // Last chunk equation reading each storage root (outputs kept to the end).
  const auto end = static_cast<std::ptrdiff_t>(b.equations.size());
  std::vector<std::ptrdiff_t> last_use(b.num_values(), -1);
  for (std::size_t e = 0; e < b.equations.size(); ++e) {
    const Equation& eq = b.equations[e];
    bool all_scalar = true;
    for (ValueId in : eq.inputs) all_scalar = all_scalar && scalar[in];
    if (all_scalar) {
      scalar[eq.output] = true;
      if (is_alias(eq.prim)) {  // outputs get a cell of their own
        plan.action[e] = out_of[eq.output] < 0 ? Action::kAlias : Action::kCopy;
        if (out_of[eq.output] < 0) root[eq.output] = root[eq.inputs[0]];
      }
      plan.hoisted.push_back(e);
      continue;
    }
    plan.per_chunk.push_back(e);
    if (is_alias(eq.prim)) {
      const int o = out_of[eq.output];
      if (o < 0) {
        plan.action[e] = Action::kAlias;
        root[eq.output] = root[eq.inputs[0]];
      } else {
        plan.action[e] = Action::kCopy;
      }
    }
    for (ValueId in : eq.inputs) last_use[root[in]] = static_cast<std::ptrdiff_t>(e);
  }
  for (std::size_t o = 0; o < b.outputs.size(); ++o) {
    if (in_place[o]) last_use[root[b.outputs[o]]] = end;
  }
  // Values computed once get their own 8-byte cells, so a scalar output never
  // reads an input's buffer (which an in-place output may overwrite).
  for (std::size_t e : plan.hoisted) {
    const Equation& eq = b.equations[e];
    plan.place[eq.output] = plan.action[e] == Action::kAlias
                                ? plan.place[root[eq.output]]
                                : Place{Loc::kScalar, plan.scalars++};
  }
  // Temporaries: gathered inputs from the start, computed values from their
  // equation, each freed after the last reader of its root.
  std::vector<int> free_slots;
  const auto take = [&] {
    if (!free_slots.empty()) {
      const int s = free_slots.back();
      free_slots.pop_back();
      return s;
    }
    return plan.slots++;
  };
  for (Gather& g : plan.gathers) {
    g.slot = take();
    plan.place[b.inputs[static_cast<std::size_t>(g.input)]].index = g.slot;
  }
  for (std::size_t e : plan.per_chunk) {
    const Equation& eq = b.equations[e];
    if (plan.action[e] == Action::kAlias) {
      plan.place[eq.output] = plan.place[root[eq.output]];
    } else {
      const int o = out_of[eq.output];
      if (o >= 0 && !in_place[static_cast<std::size_t>(o)]) {
        plan.place[eq.output] = {Loc::kOut, o};
      } else {
        plan.place[eq.output] = {Loc::kSlot, take()};
      }
    }
    for (ValueId in : eq.inputs) {
      const ValueId r = root[in];
      if (last_use[r] == static_cast<std::ptrdiff_t>(e) && plan.place[r].loc == Loc::kSlot) {
        free_slots.push_back(plan.place[r].index);
        last_use[r] = -1;  // freed once even when read twice
      }
    }
  }
  return plan;
}

// Copies the elements [start, start + len) of `src` broadcast to the plan's
// domain into dst: one row copy or fill at a time.
void gather(const BroadcastPlan<1>& plan, const void* src, std::size_t esize,
            std::size_t start, std::size_t len, void* dst) {
  visit_size(esize, [&](auto zero) {
    using U = decltype(zero);
    const U* s = static_cast<const U*>(src);
    U* d = static_cast<U*>(dst);
    const std::size_t rank = plan.extents.size();
    ShapeVec idx(rank, 0);
    std::size_t rem = start, off = 0;
    for (std::size_t dim = rank; dim-- > 0;) {
      idx[dim] = rem % plan.extents[dim];
      rem /= plan.extents[dim];
      off += idx[dim] * plan.strides[0][dim];
    }
    const std::size_t inner = plan.extents[rank - 1];
    const std::size_t step = plan.strides[0][rank - 1];
    while (len > 0) {
      const std::size_t run = std::min(inner - idx[rank - 1], len);
      if (step == 1) {
        std::memcpy(d, s + off, run * sizeof(U));
      } else {
        std::fill(d, d + run, s[off]);
      }
      d += run;
      len -= run;
      idx[rank - 1] += run;
      off += run * step;
      for (std::size_t dim = rank; dim-- > 1 && idx[dim] == plan.extents[dim];) {
        off -= idx[dim] * plan.strides[0][dim];
        idx[dim] = 0;
        ++idx[dim - 1];
        off += plan.strides[0][dim - 1];
      }
    }
  });
}

void fill(void* dst, const void* one, std::size_t esize, std::size_t n) {
  visit_size(esize, [&](auto zero) {
    using U = decltype(zero);
    U x;
    std::memcpy(&x, one, sizeof(U));
    std::fill(static_cast<U*>(dst), static_cast<U*>(dst) + n, x);
  });
}

// The elementwise kernel of body equations [first, last) of `k` computing
// `outputs`; its inputs (returned in `reads`) are the values those equations
// read and do not compute, in order of first use. Value numbers are kept.
FusedKernel part_of(const FusedKernel& k, std::size_t first, std::size_t last,
                    std::vector<ValueId> outputs, std::vector<ValueId>& reads) {
  FusedKernel part;
  part.shape = k.shape;
  part.body.avals = k.body.avals;
  std::vector<bool> known(k.body.num_values(), false);
  for (std::size_t e = first; e < last; ++e) {
    const Equation& eq = k.body.equations[e];
    for (ValueId in : eq.inputs) {
      if (known[in]) continue;
      known[in] = true;
      reads.push_back(in);
    }
    known[eq.output] = true;
    part.body.equations.push_back(eq);
  }
  part.body.inputs = reads;
  part.body.outputs = std::move(outputs);
  return part;
}

}  // namespace

// matmul (BLAS) into a buffer the elementwise group then reads, and writes
// into when the product is not an output itself (it is still in cache for
// small products; the saving is a launch and an allocation).
std::vector<std::shared_ptr<Buffer>> CpuBackend::eval_epilogue(
    const FusedKernel& k, std::span<const Array> inputs,
    std::span<const std::shared_ptr<Buffer>> into) {
  const Program& b = k.body;
  const Equation& mm = b.equations.front();
  const auto input = [&](ValueId v) {
    return inputs[static_cast<std::size_t>(std::find(b.inputs.begin(), b.inputs.end(), v) -
                                           b.inputs.begin())];
  };
  const Aval& pa = b.avals[mm.output];
  const Array operands[] = {input(mm.inputs[0]), input(mm.inputs[1])};
  const Array product(pa.dtype, pa.shape, eval_matmul(mm.prim, mm.params, operands, pa));
  std::vector<ValueId> rest;
  std::vector<std::shared_ptr<Buffer>> rest_into;
  bool product_escapes = false;
  for (std::size_t o = 0; o < b.outputs.size(); ++o) {
    if (b.outputs[o] == mm.output) {
      product_escapes = true;
      continue;
    }
    rest.push_back(b.outputs[o]);
    rest_into.push_back(o < into.size() ? into[o] : nullptr);
  }
  if (!product_escapes) {  // the product dies here: the first output that fits takes it
    for (std::size_t j = 0; j < rest.size(); ++j) {
      if (rest_into[j] == nullptr && b.avals[rest[j]] == pa) {
        rest_into[j] = product.buffer();
        break;
      }
    }
  }
  std::vector<ValueId> reads;
  const FusedKernel part = part_of(k, 1, b.equations.size(), rest, reads);
  std::vector<Array> args;
  for (ValueId v : reads) args.push_back(v == mm.output ? product : input(v));
  const std::vector<std::shared_ptr<Buffer>> bufs = eval_fused(part, args, rest_into);
  std::vector<std::shared_ptr<Buffer>> outs;
  std::size_t j = 0;
  for (ValueId v : b.outputs) outs.push_back(v == mm.output ? product.buffer() : bufs[j++]);
  return outs;
}

// The group in chunks (its escaping values, and the reduced one into a
// temporary), then the reduction kernel on it: the same bits as unfused.
std::vector<std::shared_ptr<Buffer>> CpuBackend::eval_prologue(
    const FusedKernel& k, std::span<const Array> inputs,
    std::span<const std::shared_ptr<Buffer>> into) {
  const Program& b = k.body;
  const Equation& red = b.equations.back();
  const ValueId reduced = red.inputs[0];
  std::vector<ValueId> rest(b.outputs.begin(), b.outputs.end() - 1);  // the reduction is last
  std::vector<std::shared_ptr<Buffer>> rest_into(rest.size());
  for (std::size_t o = 0; o < rest.size() && o < into.size(); ++o) rest_into[o] = into[o];
  const auto pos = std::find(rest.begin(), rest.end(), reduced);
  const auto at = static_cast<std::size_t>(pos - rest.begin());
  if (pos == rest.end()) {
    rest.push_back(reduced);
    rest_into.push_back(nullptr);
  }
  std::vector<ValueId> reads;
  const FusedKernel part = part_of(k, 0, b.equations.size() - 1, rest, reads);
  std::vector<Array> args;
  for (ValueId v : reads) {
    args.push_back(inputs[static_cast<std::size_t>(
        std::find(b.inputs.begin(), b.inputs.end(), v) - b.inputs.begin())]);
  }
  std::vector<std::shared_ptr<Buffer>> outs = eval_fused(part, args, rest_into);
  const Aval& ra = b.avals[reduced];
  const Array values[] = {Array(ra.dtype, ra.shape, outs[at])};
  std::shared_ptr<Buffer> result = eval_reduce(red.prim, red.params, values, b.avals[red.output]);
  outs.resize(b.outputs.size() - 1);  // drops the temporary (when it is one)
  outs.push_back(std::move(result));
  return outs;
}

std::vector<std::shared_ptr<Buffer>> CpuBackend::eval_fused(
    const FusedKernel& k, std::span<const Array> inputs,
    std::span<const std::shared_ptr<Buffer>> into) {
  const Program& b = k.body;
  for (const Equation& eq : b.equations) {
    for (ValueId in : eq.inputs) check_host_dtype(eq.prim, b.avals[in].dtype);
    check_host_dtype(eq.prim, b.avals[eq.output].dtype);
  }
  switch (k.kind) {
    case FusedKernel::Kind::kMatmulEpilogue:
      return eval_epilogue(k, inputs, into);
    case FusedKernel::Kind::kReducePrologue:
      return eval_prologue(k, inputs, into);
    case FusedKernel::Kind::kElementwise:
      break;
  }
  std::vector<std::shared_ptr<Buffer>> outs(b.outputs.size());
  std::vector<int> out_of(b.num_values(), -1);
  std::vector<bool> in_place(b.outputs.size(), false);
  for (std::size_t o = 0; o < b.outputs.size(); ++o) {
    out_of[b.outputs[o]] = static_cast<int>(o);
    if (o < into.size() && into[o] != nullptr) {
      outs[o] = into[o];
      in_place[o] = true;
    } else {
      outs[o] = allocate(b.avals[b.outputs[o]]);
    }
  }
  const auto n = static_cast<std::size_t>(numel(k.shape));
  if (n == 0) return outs;

  const Plan plan = make_plan(k, inputs, out_of, in_place);
  std::vector<const std::byte*> in_data(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    in_data[i] = static_cast<const std::byte*>(inputs[i].buffer()->host_data());
  }
  std::vector<std::byte*> out_data(outs.size());
  for (std::size_t o = 0; o < outs.size(); ++o) {
    out_data[o] = static_cast<std::byte*>(outs[o]->host_data());
  }
  std::vector<std::uint64_t> scalar_cells(static_cast<std::size_t>(plan.scalars));
  const auto slots = HostBuffer::allocate(
      std::max<std::size_t>(1, static_cast<std::size_t>(plan.slots)) * kSlotBytes);
  auto* slot_data = static_cast<std::byte*>(slots->host_data());

  const auto esize = [&](ValueId v) { return size_of(b.avals[v].dtype); };
  // Where value v's elements for the chunk starting at `start` are.
  const auto data = [&](ValueId v, std::size_t start) -> std::byte* {
    const Place& p = plan.place[v];
    switch (p.loc) {
      case Loc::kInput:
        return const_cast<std::byte*>(in_data[static_cast<std::size_t>(p.index)]) +
               start * esize(v);
      case Loc::kInputScalar:
        return const_cast<std::byte*>(in_data[static_cast<std::size_t>(p.index)]);
      case Loc::kScalar:
        return reinterpret_cast<std::byte*>(&scalar_cells[static_cast<std::size_t>(p.index)]);
      case Loc::kSlot:
        return slot_data + static_cast<std::size_t>(p.index) * kSlotBytes;
      case Loc::kOut:
        return out_data[static_cast<std::size_t>(p.index)] + start * esize(v);
    }
    return nullptr;
  };
  const auto operand = [&](ValueId v, std::size_t start) {
    const Loc loc = plan.place[v].loc;
    return FlatOperand{data(v, start), loc == Loc::kScalar || loc == Loc::kInputScalar};
  };
  const auto run = [&](const Equation& eq, Action action, std::size_t start,
                       std::size_t len) {
    void* out = data(eq.output, start);
    const DType in = b.avals[eq.inputs[0]].dtype;
    const DType to = b.avals[eq.output].dtype;
    if (action == Action::kAlias) return;
    if (action == Action::kCopy) {
      std::memcpy(out, data(eq.inputs[0], start), len * esize(eq.output));
      return;
    }
    switch (family(eq.prim)) {
      case PrimFamily::kUnary:
        return unary_flat(eq.prim, in, data(eq.inputs[0], start), out, len);
      case PrimFamily::kBinary:
        return binary_flat(eq.prim, in, operand(eq.inputs[0], start),
                           operand(eq.inputs[1], start), out, len);
      case PrimFamily::kWhere:
        return where_flat(to, operand(eq.inputs[0], start), operand(eq.inputs[1], start),
                          operand(eq.inputs[2], start), out, len);
      case PrimFamily::kAstype:
        return astype_flat(in, to, data(eq.inputs[0], start), out, len);
      default:
        throw Error(detail::str_cat("[fused] ", name(eq.prim), " is not elementwise"));
    }
  };

  // Chunk-invariant values: once, on one element (their operands are scalars).
  for (std::size_t e : plan.hoisted) run(b.equations[e], plan.action[e], 0, 1);

  for (std::size_t start = 0; start < n; start += kChunk) {
    const std::size_t len = std::min(kChunk, n - start);
    for (const Gather& g : plan.gathers) {
      const auto i = static_cast<std::size_t>(g.input);
      gather(g.plan, in_data[i], size_of(inputs[i].dtype()), start, len,
             slot_data + static_cast<std::size_t>(g.slot) * kSlotBytes);
    }
    for (std::size_t e : plan.per_chunk) run(b.equations[e], plan.action[e], start, len);
    // Every input of the chunk has been read: outputs that are not in place yet.
    for (std::size_t o = 0; o < outs.size(); ++o) {
      const ValueId v = b.outputs[o];
      const Place& p = plan.place[v];
      if (p.loc == Loc::kOut) continue;
      std::byte* dst = out_data[o] + start * esize(v);
      if (p.loc == Loc::kScalar) {  // (a cell: outputs never alias an input)
        fill(dst, data(v, start), esize(v), len);
      } else {
        std::memcpy(dst, data(v, start), len * esize(v));
      }
    }
  }
  return outs;
}

}  // namespace kiln::cpu
