// CPU fused elementwise kernels (dsl/fusion.hpp): one pass over the iteration
// space in blocks of at most kChunk elements. Each block evaluates the body
// equation by equation with the flat kernels of elementwise.hpp (the unfused
// kernels' own definitions, SIMD through xtensor/xsimd), on block-local
// temporaries that stay in cache, so intermediates never go to memory.
//
// Blocks: the output dims are merged as in broadcast.hpp (dims where every
// input is full, or broadcast, alike). When the merged rows are long (>= kRowMin)
// a block is a piece of one row, where every input is a contiguous run or one
// element (a bias row, a per-row scalar): inputs are read in place, nothing is
// copied. Short rows are cut into kChunk-element blocks across rows instead, and
// inputs broadcast other than as a scalar are gathered into a temporary (a row
// copy or fill at a time).
//
// Where values live during a block:
// - equations whose inputs are all one element in the block (scalars, per-row
//   scalars) run on one element into a cell of their own;
// - a body output that is a fresh buffer is written in place by its equation; one
//   that goes `into` an input's buffer is computed into a temporary and copied
//   there after the block's last equation, when every input of that block has
//   been read;
// - bitcast and stop_gradient move no data: their value is their operand's
//   storage (copied only when it is a body output);
// - temporaries are recycled after their value's last reader (liveness over the
//   body), so a long chain such as threefry needs only a few.
// A body whose per-block equations the code generator covers (jit.hpp: exactly
// rounded f32 ops, and calls of the SIMD kernels' code for exp, log, tanh, ...,
// i32 ops and conversions) is instead compiled into one loop with its values in
// registers: the block is one call of that code (the one-element equations and
// the gathers run as above).
#include <algorithm>
#include <cstring>

#include "kiln/backends/cpu/bits.hpp"
#include "kiln/backends/cpu/cpu_backend.hpp"
#include "kiln/backends/cpu/half.hpp"
#include "kiln/backends/cpu/elementwise.hpp"
#include "kiln/backends/cpu/jit.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/thread_pool.hpp"
#include "kiln/runtime/strings.hpp"
#include "kiln/dsl/fusion.hpp"

namespace kiln::cpu {
namespace {

// Fills are plain loops; GCC vectorizes them at -O2 only when asked.
#if defined(__GNUC__) && !defined(__clang__)
#define KILN_FUSED_VECTORIZE [[gnu::optimize("tree-loop-vectorize")]]
#else
#define KILN_FUSED_VECTORIZE
#endif

// Elements per block: a temporary is at most 32 KiB (f64), and a handful of them
// stay in L2 while the body runs (1024 to 8192 measured alike on a 1M chain).
constexpr std::size_t kChunk = 4096;
constexpr std::size_t kSlotBytes = kChunk * 8;
// Slots are this far apart: not a multiple of 4 KiB, so an op reading one slot
// and writing another at the same offset does not stall on 4K aliasing.
constexpr std::size_t kSlotStride = kSlotBytes + 5 * 64;
// Kernels of at least 2 * this many elements are split over the thread pool, in
// tasks of about this many. Since the pool's workers poll before they sleep
// (runtime/thread_pool.cpp), handing a task to a worker inside a step costs
// about a microsecond, not the 5-20 us of a wake-up: 2^14 rather than 2^16
// splits the MLP step's 128x256 activations and its Adam updates, and made
// the step 6% faster on 2 threads (bench_jit BM_kiln_mlp_step 517 -> 484 us).
constexpr std::size_t kParallelGrain = std::size_t{1} << 14;
// Rows at least this long are walked row by row (no gathers); each block costs
// one call per equation (~20-40 ns), so shorter rows take cross-row chunks.
constexpr std::size_t kRowMin = 512;
// Elements in the widest SIMD batch xsimd may use (f32 on AVX-512).
constexpr std::size_t kSimdAlign = 16;

enum class Loc : std::uint8_t {
  kInput,        // an input's run of the block, read in place
  kInputScalar,  // an input's one element for the whole block
  kScalar,       // a value computed on one element, in its own cell
  kSlot,         // a block temporary (gathered input or computed value)
  kOut,          // the block's part of a fresh output buffer
};

struct Place {
  Loc loc = Loc::kSlot;
  int index = -1;  // input, cell, slot or output number
};

enum class Action : std::uint8_t { kCompute, kAlias, kCopy };

// The output dims merged where every input is full, or broadcast, alike; each
// input's element stride per merged dim (0 where it broadcasts).
struct Merged {
  std::vector<std::size_t> extents;
  std::vector<std::vector<std::size_t>> strides;  // [input][dim]

  std::size_t row() const { return extents.back(); }
  std::size_t step(std::size_t input) const { return strides[input].back(); }
};

Merged merge_dims(const Shape& out, std::span<const Array> inputs) {
  Merged m;
  std::vector<std::vector<bool>> full;  // per merged dim, per input
  for (std::size_t d = 0; d < out.size(); ++d) {
    const auto extent = static_cast<std::size_t>(out[d]);
    if (extent == 1) continue;
    std::vector<bool> f(inputs.size());
    for (std::size_t k = 0; k < inputs.size(); ++k) {
      const Shape& s = inputs[k].shape();
      const std::size_t lead = out.size() - s.size();
      f[k] = d >= lead && s[d - lead] != 1;
    }
    if (!full.empty() && full.back() == f) {
      m.extents.back() *= extent;
    } else {
      m.extents.push_back(extent);
      full.push_back(std::move(f));
    }
  }
  if (m.extents.empty()) {  // one element
    m.extents.push_back(1);
    full.emplace_back(inputs.size(), false);
  }
  m.strides.assign(inputs.size(), std::vector<std::size_t>(m.extents.size()));
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    std::size_t acc = 1;
    for (std::size_t d = m.extents.size(); d-- > 0;) {
      m.strides[k][d] = full[d][k] ? acc : 0;
      if (full[d][k]) acc *= m.extents[d];
    }
  }
  return m;
}

// The KernelCache key of the elementwise plan (low bits: the outputs written
// into given buffers); fused_anchored.cpp keys its splits with bit 62.
constexpr std::uint64_t kPlanKey = std::uint64_t{1} << 63;

// This thread's block temporaries: `slots` of kSlotBytes, 64-byte aligned, kept
// between calls (a fused kernel runs on one thread at a time per block loop).
std::byte* scratch(std::size_t slots) {
  thread_local std::vector<std::byte> storage;
  const std::size_t need = std::max<std::size_t>(1, slots) * kSlotStride + 64;
  if (storage.size() < need) storage.resize(need);
  const auto addr = reinterpret_cast<std::uintptr_t>(storage.data());
  return storage.data() + ((64 - addr % 64) % 64);
}

struct Gather {
  int input = -1;
  int slot = -1;
};

struct Plan {
  Merged merged;
  bool rows = false;                      // blocks are pieces of merged rows
  std::vector<Place> place;               // per body value
  std::vector<Action> action;             // per equation
  std::vector<FlatKernel> kernel;         // per kCompute equation
  std::vector<std::size_t> scalar_eqs;    // run on one element per block
  std::vector<std::size_t> per_block;     // run on the block, in order
  std::vector<Gather> gathers;
  int slots = 0;
  int cells = 0;
  // The per-block equations as one generated loop (jit.hpp), when it has them:
  // it reads the leaves' places and writes every output (output o: pointer o).
  std::shared_ptr<const JitBody> jit;
};

// Hands the per-block equations to the code generator when every body output is
// computed by one of them (an output that is an input or a scalar cell is
// copied after the block, which the generated code's stores would race with).
void plan_jit(const Program& b, Plan& plan) {
  std::vector<bool> per_block(b.num_values(), false);
  for (std::size_t e : plan.per_block) per_block[b.equations[e].output] = true;
  for (ValueId v : b.outputs) {
    if (!per_block[v]) return;
  }
  std::vector<JitLeaf> leaf(b.num_values(), JitLeaf::kNone);
  for (std::size_t v = 0; v < leaf.size(); ++v) {
    switch (plan.place[v].loc) {
      case Loc::kInput:
      case Loc::kSlot:  // (a leaf in a slot is a gathered input)
        leaf[v] = JitLeaf::kRun;
        break;
      case Loc::kInputScalar:
      case Loc::kScalar: leaf[v] = JitLeaf::kBroadcast; break;
      case Loc::kOut: break;
    }
  }
  plan.jit = jit_compile(b, plan.per_block, b.outputs, leaf);
}

bool is_alias(Prim p) { return has_trait(p, PrimTrait::kAlias); }

// `in_place[o]`: output o is written into an input's buffer.
Plan make_plan(const FusedKernel& k, std::span<const Array> inputs,
               const std::vector<bool>& in_place) {
  const Program& b = k.body;
  std::vector<int> out_of(b.num_values(), -1);  // value -> its output number
  for (std::size_t o = 0; o < b.outputs.size(); ++o) out_of[b.outputs[o]] = static_cast<int>(o);
  const std::int64_t n = numel(k.shape);
  Plan plan;
  plan.merged = merge_dims(k.shape, inputs);
  const Merged& merged = plan.merged;
  plan.rows = merged.extents.size() == 1 || merged.row() >= kRowMin;
  // xtensor computes exp/log/tanh/sigmoid with xsimd on aligned runs and with
  // std:: on the ends, which differ in the last bit. Unfused, the SIMD runs
  // start at element 0 of the array; fused blocks must start on a multiple of
  // the batch size too (chunks do; rows must be a multiple long) to give the
  // same bits.
  if (plan.rows && merged.extents.size() > 1 && merged.row() % kSimdAlign != 0) {
    for (const Equation& eq : b.equations) {
      if (has_trait(eq.prim, PrimTrait::kTranscendental)) plan.rows = false;
    }
  }
  plan.place.resize(b.num_values());
  plan.action.assign(b.equations.size(), Action::kCompute);
  plan.kernel.assign(b.equations.size(), nullptr);
  for (std::size_t e = 0; e < b.equations.size(); ++e) {
    const Equation& eq = b.equations[e];
    if (is_alias(eq.prim)) continue;
    if (!fusible(eq.prim) || family(eq.prim) == PrimFamily::kIdentity) {
      // dsl/fusion.cpp puts only elementwise primitives in an elementwise body
      throw Error(detail::str_cat("[fused] ", name(eq.prim), " is not elementwise"));
    }
    const DType to = b.avals[eq.output].dtype;
    plan.kernel[e] = family(eq.prim) == PrimFamily::kWhere
                         ? flat_kernel(eq.prim, to, to)
                         : flat_kernel(eq.prim, b.avals[eq.inputs[0]].dtype, to);
  }
  std::vector<bool> scalar(b.num_values(), false);
  std::vector<ValueId> root(b.num_values());  // the value whose storage v uses
  for (std::size_t v = 0; v < root.size(); ++v) root[v] = static_cast<ValueId>(v);
  for (std::size_t i = 0; i < b.inputs.size(); ++i) {
    const ValueId v = b.inputs[i];
    const std::int64_t m = inputs[i].size();
    const bool whole = plan.rows ? merged.step(i) != 0 : m == n;
    const bool one = plan.rows ? merged.step(i) == 0 : m == 1;
    if (whole) {
      plan.place[v] = {Loc::kInput, static_cast<int>(i)};
    } else if (one) {
      plan.place[v] = {Loc::kInputScalar, static_cast<int>(i)};
      scalar[v] = true;
    } else {
      plan.place[v] = {Loc::kSlot, -1};  // slot assigned below
      plan.gathers.push_back(Gather{static_cast<int>(i), -1});
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
      plan.scalar_eqs.push_back(e);
      continue;
    }
    plan.per_block.push_back(e);
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
  // Values computed on one element get their own 8-byte cells, so a scalar
  // output never reads an input's buffer (which an in-place output may
  // overwrite).
  for (std::size_t e : plan.scalar_eqs) {
    const Equation& eq = b.equations[e];
    plan.place[eq.output] = plan.action[e] == Action::kAlias
                                ? plan.place[root[eq.output]]
                                : Place{Loc::kScalar, plan.cells++};
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
  for (std::size_t e : plan.per_block) {
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
  plan_jit(b, plan);
  return plan;
}

// Copies the elements [start, start + len) of input `k` broadcast to the merged
// domain into dst: one row copy or fill at a time.
KILN_FUSED_VECTORIZE void gather(const Merged& m, std::size_t k, const void* src,
                                 std::size_t esize, std::size_t start, std::size_t len,
                                 void* dst) {
  const std::vector<std::size_t>& strides = m.strides[k];
  visit_size(esize, [&](auto zero) {
    using U = decltype(zero);
    const U* s = static_cast<const U*>(src);
    U* d = static_cast<U*>(dst);
    const std::size_t rank = m.extents.size();
    std::vector<std::size_t> idx(rank, 0);
    std::size_t rem = start, off = 0;
    for (std::size_t dim = rank; dim-- > 0;) {
      idx[dim] = rem % m.extents[dim];
      rem /= m.extents[dim];
      off += idx[dim] * strides[dim];
    }
    const std::size_t inner = m.extents[rank - 1];
    const std::size_t step = strides[rank - 1];
    while (len > 0) {
      const std::size_t run = std::min(inner - idx[rank - 1], len);
      if (step == 1) {
        std::memcpy(d, s + off, run * sizeof(U));
      } else {
        const U x = s[off];
        for (std::size_t i = 0; i < run; ++i) d[i] = x;
      }
      d += run;
      len -= run;
      idx[rank - 1] += run;
      off += run * step;
      for (std::size_t dim = rank; dim-- > 1 && idx[dim] == m.extents[dim];) {
        off -= idx[dim] * strides[dim];
        idx[dim] = 0;
        ++idx[dim - 1];
        off += strides[dim - 1];
      }
    }
  });
}

KILN_FUSED_VECTORIZE void fill(void* dst, const void* one, std::size_t esize, std::size_t n) {
  visit_size(esize, [&](auto zero) {
    using U = decltype(zero);
    U x;
    std::memcpy(&x, one, sizeof(U));
    U* d = static_cast<U*>(dst);
    for (std::size_t i = 0; i < n; ++i) d[i] = x;
  });
}

// Runs a planned elementwise kernel over a range of its units (merged rows, or
// chunks across rows) on the calling thread: the block state (its place in the
// iteration, the inputs' runs, the one-element cells) and this thread's
// temporaries.
class Blocks {
 public:
  Blocks(const Plan& plan, const Program& body, std::span<const std::byte* const> in_data,
         std::span<std::byte* const> out_data, std::span<const Array> inputs)
      : plan_(plan),
        b_(body),
        in_data_(in_data),
        out_data_(out_data),
        inputs_(inputs),
        cells_(static_cast<std::size_t>(plan.cells)),
        slots_(scratch(static_cast<std::size_t>(plan.slots))),
        block_in_(inputs.size()),
        jit_in_(plan.jit ? plan.jit->operands.size() : 0),
        jit_out_(plan.jit ? out_data.size() : 0) {}

  // Units [first, last).
  void run(std::size_t first, std::size_t last) {
    if (plan_.rows) return run_rows(first, last);
    const auto n = static_cast<std::size_t>(numel(b_.avals[b_.outputs[0]].shape));
    for (std::size_t c = first; c < last; ++c) {
      start_ = c * kChunk;
      const std::size_t len = std::min(kChunk, n - start_);
      for (std::size_t i = 0; i < inputs_.size(); ++i) {
        const bool one = plan_.place[b_.inputs[i]].loc == Loc::kInputScalar;
        block_in_[i] = const_cast<std::byte*>(in_data_[i]) +
                       (one ? 0 : start_ * size_of(inputs_[i].dtype()));
      }
      for (const Gather& g : plan_.gathers) {
        const auto i = static_cast<std::size_t>(g.input);
        gather(plan_.merged, i, in_data_[i], size_of(inputs_[i].dtype()), start_, len,
               slots_ + static_cast<std::size_t>(g.slot) * kSlotStride);
      }
      run_block(len);
    }
  }

 private:
  // Merged rows [first, last), each in pieces of at most kChunk.
  void run_rows(std::size_t first, std::size_t last) {
    const Merged& m = plan_.merged;
    const std::size_t rank = m.extents.size(), row = m.row();
    std::vector<std::size_t> idx(rank, 0), off(inputs_.size(), 0);
    for (std::size_t d = rank - 1, rem = first; d-- > 0;) {  // row `first`'s index
      idx[d] = rem % m.extents[d];
      rem /= m.extents[d];
      for (std::size_t i = 0; i < inputs_.size(); ++i) off[i] += idx[d] * m.strides[i][d];
    }
    for (std::size_t r = first; r < last; ++r) {
      for (std::size_t at = 0; at < row; at += kChunk) {
        start_ = r * row + at;
        for (std::size_t i = 0; i < inputs_.size(); ++i) {
          block_in_[i] = const_cast<std::byte*>(in_data_[i]) +
                         (off[i] + at * m.step(i)) * size_of(inputs_[i].dtype());
        }
        run_block(std::min(kChunk, row - at));
      }
      for (std::size_t d = rank - 1; d-- > 0;) {  // odometer over the outer dims
        for (std::size_t i = 0; i < inputs_.size(); ++i) off[i] += m.strides[i][d];
        if (++idx[d] < m.extents[d]) break;
        for (std::size_t i = 0; i < inputs_.size(); ++i) off[i] -= m.strides[i][d] * m.extents[d];
        idx[d] = 0;
      }
    }
  }

  std::size_t esize(ValueId v) const { return size_of(b_.avals[v].dtype); }

  std::byte* data(ValueId v) {
    const Place& p = plan_.place[v];
    switch (p.loc) {
      case Loc::kInput:
      case Loc::kInputScalar:
        return block_in_[static_cast<std::size_t>(p.index)];
      case Loc::kScalar:
        return reinterpret_cast<std::byte*>(&cells_[static_cast<std::size_t>(p.index)]);
      case Loc::kSlot:
        return slots_ + static_cast<std::size_t>(p.index) * kSlotStride;
      case Loc::kOut:
        return out_data_[static_cast<std::size_t>(p.index)] + start_ * esize(v);
    }
    return nullptr;
  }

  void equation(std::size_t e, std::size_t len) {
    const Equation& eq = b_.equations[e];
    const Action action = plan_.action[e];
    if (action == Action::kAlias) return;
    void* out = data(eq.output);
    if (action == Action::kCopy) {
      std::memcpy(out, data(eq.inputs[0]), len * esize(eq.output));
      return;
    }
    FlatOperand ops[3];
    for (std::size_t i = 0; i < eq.inputs.size() && i < 3; ++i) {
      const Loc loc = plan_.place[eq.inputs[i]].loc;
      ops[i] = FlatOperand{data(eq.inputs[i]), loc == Loc::kScalar || loc == Loc::kInputScalar};
    }
    plan_.kernel[e](ops, out, len);
  }

  // The block: output elements [start_, start_ + len).
  void run_block(std::size_t len) {
    for (std::size_t e : plan_.scalar_eqs) equation(e, 1);
    if (plan_.jit) {  // one call computes and stores every output
      for (std::size_t k = 0; k < jit_in_.size(); ++k) jit_in_[k] = data(plan_.jit->operands[k]);
      for (std::size_t o = 0; o < jit_out_.size(); ++o) {
        jit_out_[o] = out_data_[o] + start_ * esize(b_.outputs[o]);
      }
      plan_.jit->fn(jit_in_.data(), jit_out_.data(), len);
      return;
    }
    for (std::size_t e : plan_.per_block) equation(e, len);
    // Every input of the block has been read: outputs not written in place yet.
    for (std::size_t o = 0; o < out_data_.size(); ++o) {
      const ValueId v = b_.outputs[o];
      const Place& p = plan_.place[v];
      if (p.loc == Loc::kOut) continue;
      std::byte* dst = out_data_[o] + start_ * esize(v);
      if (p.loc == Loc::kScalar) {  // (a cell: outputs never alias an input)
        fill(dst, data(v), esize(v), len);
      } else {
        std::memcpy(dst, data(v), len * esize(v));
      }
    }
  }

  const Plan& plan_;
  const Program& b_;
  std::span<const std::byte* const> in_data_;
  std::span<std::byte* const> out_data_;
  std::span<const Array> inputs_;
  std::vector<std::uint64_t> cells_;
  std::byte* slots_;
  std::size_t start_ = 0;
  std::vector<std::byte*> block_in_;  // input i's run (or one element) in the block
  std::vector<const void*> jit_in_;   // the generated code's operands and outputs
  std::vector<void*> jit_out_;
};

// An elementwise kernel: the plan (kept in k.cache), then its units of work.
std::vector<std::shared_ptr<Buffer>> eval_elementwise(const FusedKernel& k,
                                                      std::span<const Array> inputs,
                                                      std::span<const std::shared_ptr<Buffer>> into) {
  const Program& b = k.body;
  std::vector<std::shared_ptr<Buffer>> outs(b.outputs.size());
  std::vector<bool> in_place(b.outputs.size(), false);
  for (std::size_t o = 0; o < b.outputs.size(); ++o) {
    if (o < into.size() && into[o] != nullptr) {
      outs[o] = into[o];
      in_place[o] = true;
    } else {
      outs[o] = allocate(b.avals[b.outputs[o]]);
    }
  }
  const auto n = static_cast<std::size_t>(numel(k.shape));
  if (n == 0) return outs;

  // The plan depends on the kernel (whose body fixes the inputs' shapes) and on
  // which outputs go into given buffers: made on the kernel's first run so.
  std::uint64_t key = kPlanKey;
  for (std::size_t o = 0; o < in_place.size() && o < 62; ++o) {
    if (in_place[o]) key |= std::uint64_t{1} << o;
  }
  const auto make = [&] {
    return std::make_shared<const Plan>(make_plan(k, inputs, in_place));
  };
  const std::shared_ptr<const Plan> planned =
      in_place.size() <= 62 ? k.cache.get<Plan>(key, make) : make();
  const Plan& plan = *planned;
  std::vector<const std::byte*> in_data(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    in_data[i] = static_cast<const std::byte*>(inputs[i].buffer()->host_data());
  }
  std::vector<std::byte*> out_data(outs.size());
  for (std::size_t o = 0; o < outs.size(); ++o) {
    out_data[o] = static_cast<std::byte*>(outs[o]->host_data());
  }
  // Units of work: merged rows (each in pieces of at most kChunk), or chunks
  // across rows. Large kernels split them over the thread pool; each task has
  // its own block state and temporaries, and every element is computed the
  // same way whichever task has it.
  const std::size_t units = plan.rows ? n / plan.merged.row() : (n + kChunk - 1) / kChunk;
  const std::size_t tasks = std::min(units, std::max<std::size_t>(1, n / kParallelGrain));
  parallel_for(tasks, [&](std::size_t t) {
    Blocks blocks(plan, b, in_data, out_data, inputs);
    blocks.run(units * t / tasks, units * (t + 1) / tasks);
  });
  return outs;
}

// Where k.cache keeps computed_in_f32(k) (kPlanKey and kSplitKey are others).
constexpr std::uint64_t kWideKey = std::uint64_t{3} << 61;

}  // namespace

std::vector<std::shared_ptr<Buffer>> CpuBackend::eval_fused(
    const FusedKernel& k, std::span<const Array> inputs,
    std::span<const std::shared_ptr<Buffer>> into) {
  switch (k.kind) {
    case FusedKernel::Kind::kMatmulEpilogue:
      return eval_epilogue(k, inputs, into);
    case FusedKernel::Kind::kReducePrologue:
      return eval_prologue(k, inputs, into);
    case FusedKernel::Kind::kUnfoldMatmul:
    case FusedKernel::Kind::kMatmulFold:
      return eval_implicit_gemm(k, inputs);
    case FusedKernel::Kind::kElementwise:
      break;
  }
  if (has_16bit_float(k)) {
    const std::shared_ptr<const FusedKernel> wide = k.cache.get<FusedKernel>(
        kWideKey, [&] { return std::make_shared<const FusedKernel>(computed_in_f32(k)); });
    return eval_elementwise(*wide, inputs, into);
  }
  return eval_elementwise(k, inputs, into);
}

}  // namespace kiln::cpu
