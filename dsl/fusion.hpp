// Fusion: splits an optimized Program into launch steps. A step is one primitive
// binding, or a FusedKernel: a group of elementwise equations (with implicit
// broadcasting) computed in one pass over one iteration shape, so intermediates
// never reach memory. Backends run a FusedKernel through Backend::eval_fused; the
// default there evaluates the body equation by equation, so a backend without a
// fused kernel is correct, only slower.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "kiln/dsl/program.hpp"

namespace kiln {

// A fused elementwise group. `body` is a Program whose inputs are the group's
// inputs (arrays broadcast-compatible with `shape`), whose equations are all
// elementwise (unary, binary, where, astype, bitcast, stop_gradient) and whose
// outputs all have shape `shape`. It has no constants: a constant used by the
// group is an input of the step.
//
// A kernel may also carry one anchor, a non-elementwise equation fused with the
// group (`kind`):
// - kMatmulEpilogue: the first body equation is a matmul of two body inputs
//   (not broadcast-compatible with `shape`) whose result has shape `shape`; the
//   rest is the elementwise group reading it (bias, activation). The matmul's
//   result is a body output only when it is read outside the kernel.
// - kReducePrologue: the last body equation is a sum/max/min of a value the
//   group computes (shape `shape`); its result is a body output of its own
//   shape, after the group's escaping values.
// Two more kinds have no elementwise group: an implicit-GEMM convolution's
// halves, which a backend forms only when it runs them itself
// (Backend::fuses_windows), since evaluated one equation at a time they would
// only repeat work. `shape` is the shape of the kernel's one output.
// - kUnfoldMatmul: unfold, an optional reshape of its columns, and a matmul
//   reading them as one operand. The columns never reach memory whole: the
//   backend builds each product's part next to the product. An unfold read
//   only by matmuls is copied into each of their kernels (a convolution's
//   forward product and its weight gradient both read the columns).
// - kMatmulFold: a matmul, an optional reshape, and the fold of its result,
//   which nothing else reads (a convolution's input gradient).
// Backend::eval_fused's default evaluates any kind equation by equation; a
// backend that fuses only some kinds hands the others to it.
// What a backend prepares for a kernel on its first run (the CPU's block plan and
// resolved kernels), kept with the kernel so a compiled program's later runs do
// not plan again. Entries are keyed by the backend (which owns the key space of
// the kernels it runs); every thread running the kernel shares them. A copy of a
// kernel starts with an empty cache.
class KernelCache {
 public:
  KernelCache() = default;
  KernelCache(const KernelCache&) {}
  KernelCache& operator=(const KernelCache&) { return *this; }

  // The entry for `key`, made by `make()` (returning std::shared_ptr<const T>)
  // on first use. Two threads may both make it; one result is kept.
  template <class T, class Make>
  std::shared_ptr<const T> get(std::uint64_t key, Make&& make) const {
    if (auto found = find(key)) return std::static_pointer_cast<const T>(found);
    std::shared_ptr<const T> made = make();
    return std::static_pointer_cast<const T>(insert(key, std::move(made)));
  }

 private:
  std::shared_ptr<const void> find(std::uint64_t key) const;
  std::shared_ptr<const void> insert(std::uint64_t key, std::shared_ptr<const void> value) const;

  mutable std::mutex mu_;
  mutable std::vector<std::pair<std::uint64_t, std::shared_ptr<const void>>> entries_;
};

struct FusedKernel {
  enum class Kind : std::uint8_t {
    kElementwise,
    kMatmulEpilogue,
    kReducePrologue,
    kUnfoldMatmul,
    kMatmulFold,
  };
  static constexpr int kNumKinds = 5;  // the harness in tests/test_fusion.cpp covers each
  Program body;
  Shape shape;
  Kind kind = Kind::kElementwise;
  KernelCache cache;  // the backend's prepared state (see KernelCache)
};

// One launch of a compiled program: a single equation, or a fused kernel. Values
// are the outer program's ValueIds.
struct Step {
  const Equation* equation = nullptr;          // single binding (points into the program)
  std::shared_ptr<const FusedKernel> kernel;   // or a fused group
  std::vector<ValueId> inputs;                 // fused: one per body input
  std::vector<ValueId> outputs;                // fused: one per body output
  KernelCache cache;  // single binding: the backend's prepared state (Backend::eval_step)
};

struct FusionOptions {
  bool enabled = true;  // KILN_FUSION=0 turns fusion off (one step per equation)
  bool anchors = true;  // fuse matmul epilogues and reduction prologues
  // Form kUnfoldMatmul and kMatmulFold kernels. Executable clears it for a
  // backend that does not run them itself (Backend::fuses_windows).
  bool windows = true;
};

// The launch steps of `p`, in an order that respects dependencies. `p` must
// outlive the result (single steps point at its equations).
std::vector<Step> fuse(const Program& p, const FusionOptions& options = {});

// The program with its kernel boundaries, for debugging:
//   fused[shape=(128,256)] { lambda ; a:f32[128,256] b:f32[256]. let ... }
std::string to_string(const Program& p, const std::vector<Step>& steps);

// The kind's name as to_string prints it ("" for kElementwise).
const char* name(FusedKernel::Kind kind);

// Whether `prim` can be part of a fused elementwise group.
bool fusible(Prim prim);

}  // namespace kiln
