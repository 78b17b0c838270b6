// Kernel generators: each builds the SPIR-V of one kernel family from shapes,
// dtypes and the scalar semantics of the primitives, and says how to dispatch it.
// Shapes and strides are baked into the kernel as constants (index arithmetic by
// constant divisors is cheap, and the pipeline cache shares equal kernels); only
// the element count of a contiguous kernel is a push constant, so one kernel
// serves every size.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/backends/vulkan/pipeline.hpp"
#include "kiln/backends/vulkan/spirv.hpp"
#include "kiln/dsl/primitive.hpp"

namespace kiln {
struct FusedKernel;  // dsl/fusion.hpp
}

namespace kiln::vk {

class Context;

// Where operand elements live relative to an iteration domain: element
// offset + sum(index[d] * strides[d]). Broadcast dims have stride 0.
struct View {
  std::int64_t offset = 0;
  Shape strides;
};
Shape contiguous_strides(const Shape& shape);
// The view of an array of `shape` broadcast (numpy, right-aligned) to `domain`.
View broadcast_view(const Shape& shape, const Shape& domain);

// The scalar semantics of an elementwise primitive, on compute-typed values:
// the same results as the CPU backend (wrapping integers, x / 0 == 0, NaN-
// propagating max/min, saturating float -> int). `in` is the operands' dtype.
// Throws DTypeError for what the device cannot compute (64-bit transcendentals).
spv::Val emit_elementwise(spv::Builder& b, Prim p, const Params& params,
                          std::span<const spv::Val> args, DType in, DType out);

// Every generator below takes `addressed`: bit i says binding i is an array
// larger than one storage-buffer descriptor can address
// (Capabilities::max_storage_buffer_range), which the kernel then reads and
// writes through its device address (spv::Builder). Part of the kernel's key.
// The backend computes it from the arrays it binds (vulkan_backend.cpp).

// A dispatch: kernel + group counts + push constants.
struct Launch {
  const Pipeline* pipeline = nullptr;
  std::array<std::uint32_t, 3> groups{1, 1, 1};
  std::vector<std::uint32_t> push;
};
// A Launch resolved once and kept across calls (a compiled kernel's KernelCache
// entry, vulkan_backend.cpp), so a later call dispatches it without building
// its spec or key and without a pipeline-cache lookup. The pipeline is held
// weakly and used only while the pipeline cache still holds it
// (PipelineCache::touch, which also counts the use for the LRU order): kept
// launches never keep an evicted pipeline in use, so KILN_VK_MAX_PIPELINES
// bounds them too. An evicted one is resolved again (the normal lookup, which
// compiles it again) and the result replaces the kept one. Shared by every
// thread running the kernel (a short lock; the lookup itself runs unlocked).
class KeptLaunch {
 public:
  struct Held {
    std::shared_ptr<const Launch> launch;      // launch->pipeline == pipeline.get()
    std::shared_ptr<const Pipeline> pipeline;  // holds it until it is dispatched
    const Launch& operator*() const { return *launch; }
  };
  // The kept launch, or `resolve()` (returning a Launch) kept in its place.
  template <class Resolve>
  Held get(Context& ctx, Resolve&& resolve) const {
    if (Held h = find(ctx); h.launch) return h;
    return keep(resolve());
  }

 private:
  Held find(Context& ctx) const;  // empty when none is kept or it was evicted
  Held keep(Launch l) const;
  mutable std::mutex mu_;
  mutable std::shared_ptr<const Launch> launch_;
  mutable std::weak_ptr<const Pipeline> pipeline_;
};

std::array<std::uint32_t, 3> grid_for(const Context& ctx, std::uint64_t groups,
                                      const char* what);
std::uint32_t local_size(const Context& ctx);

// The view format of a uniform texel buffer over a 32-bit array (4 per texel).
VkFormat texel_format(DType d);

// sum_d index_d(x) * strides[d], x decomposed row-major over dims.
spv::Val offset_of(spv::Builder& b, spv::Val x, const Shape& dims, const Shape& strides);

// ---- map kernels: out[out_view(i)] = body(i) over a domain ----
struct MapIndex;  // per-invocation index helper given to the body
struct MapSpec {
  Shape domain;
  std::vector<DType> inputs;   // bindings 0..n-1; the output(s) follow
  std::vector<View> views;     // per input (for MapIndex::load)
  DType out = DType::kF32;
  View out_view;               // defaults to contiguous when strides are empty
  bool collapse = true;        // merge dims (body must not use MapIndex::dim)
  std::string key;             // identifies the body (prim, params, dtypes)
  std::function<spv::Val(spv::Builder&, MapIndex&)> body;
  // Several outputs (fused kernels): when `outs` is not empty it replaces `out`
  // and `body`; output k is binding n + k, written through out_view like `out`.
  std::vector<DType> outs;
  std::function<std::vector<spv::Val>(spv::Builder&, MapIndex&)> multi_body;
};
struct MapIndex {
  spv::Builder* b;
  const Shape* domain;
  spv::Val linear;
  std::vector<spv::Val> dims;  // multi-index over domain (empty when collapsed)
  const std::vector<View>* views;
  // Vectorised kernels: each input's 4 or 8 lanes, loaded up front, and the lane
  // the body computes now (load() returns that lane).
  const std::vector<std::vector<spv::Val>>* lanes = nullptr;
  std::size_t lane = 0;
  spv::Val dim(std::size_t d) const { return dims.at(d); }
  spv::Val offset(std::size_t input) const;  // element offset of input's view
  spv::Val load(std::size_t input) const;
  spv::Val load_at(std::size_t input, const spv::Val& offset) const;
};
Launch map_kernel(Context& ctx, MapSpec spec, std::uint32_t addressed);

// unfold or fold (dsl/params.hpp WindowParams) of `dtype` producing `out`, as
// a map kernel over the result (kernel_window.cpp).
MapSpec window_spec(Prim p, const WindowParams& q, DType dtype, const Aval& out);

// ---- fused elementwise groups (dsl/fusion.hpp): one map kernel over the
// group's shape whose body is every equation's scalar code (emit_elementwise)
// in order; inputs are read through broadcast views, each output is stored
// once. Bindings: the body's inputs, then its outputs.
// Matmul epilogues and reduction prologues go through matmul_kernel and
// reduce_kernel with a FusedPart. Bindings: fused_inputs(kernel) (positions in
// body.inputs, in binding order), then the body's outputs in order.
Launch fused_kernel(Context& ctx, const FusedKernel& kernel, std::uint32_t addressed);
std::vector<std::size_t> fused_inputs(const FusedKernel& kernel);

// A fused elementwise part of a reduction or matmul kernel (kernel_fused.cpp):
// extra inputs read through views over the kernel's domain, extra outputs
// stored at the element the kernel is at, and the body computing them. `load(k)`
// reads extra input k at the current element.
using LoadFn = std::function<spv::Val(std::size_t)>;
struct FusedPart {
  std::vector<DType> inputs;
  std::vector<View> views;     // over the kernel's domain (see each spec)
  std::vector<DType> outputs;
  std::string key;             // identifies the body
};

// ---- reductions over the trailing axes of a (kept..., reduced...) domain ----
struct ReduceSpec {
  Shape kept, reduced;      // iteration domain split; input view over kept ++ reduced
  View view;                // of the input over kept ++ reduced
  DType in = DType::kF32, out = DType::kF32;
  Prim op = Prim::kSum;     // kSum, kMax, kMin, kArgmax, kArgmin
  // A fused prologue (sum/max/min only): the reduced elements come from
  // `prologue` (its result 0, of dtype `in`) instead of an input binding. Its
  // inputs are bindings 0..k-1 with views over kept ++ reduced; its other
  // results are stored at the offsets `view` gives (the contiguous layout of
  // the reduced array) in bindings k..k+j-1; the reduction's output is last.
  const FusedPart* fused = nullptr;
  std::function<std::vector<spv::Val>(spv::Builder&, const LoadFn&)> prologue;
};
// The spec of reducing an array of `shape` over params' axes (or axis).
ReduceSpec reduce_spec(Prim p, const Params& params, const Shape& shape, DType in, DType out);
Launch reduce_kernel(Context& ctx, const ReduceSpec& spec, std::uint32_t addressed);

// ---- batched matmul: out[b, m, n] = sum_k a[view_a(b), m, k] * b[view_b(b), k, n]
struct MatmulSpec {
  Shape batch;               // output batch dims
  View a_batch, b_batch;     // per-batch element offsets (strides over batch dims)
  std::int64_t m = 0, n = 0, k = 0;
  DType dtype = DType::kF32;
  // A fused epilogue: each output element's product goes to `epilogue`, which
  // returns one value per output of `fused`; extra inputs are bindings after A
  // and B with views over (batch..., m, n), the outputs follow (contiguous).
  const FusedPart* fused = nullptr;
  std::function<std::vector<spv::Val>(spv::Builder&, const spv::Val& product, const LoadFn&)>
      epilogue;
};
// The spec of matmul(a, b) -> out (shapes as the op's rule left them).
MatmulSpec matmul_spec(const Shape& a, const Shape& b, const Aval& out);
Launch matmul_kernel(Context& ctx, const MatmulSpec& spec, std::uint32_t addressed);
// The cooperative-matrix kernel's source for subgroups of `subgroup_size`
// (tests assemble and validate it on devices without the extension).
KernelSource coop_matmul_source(const MatmulSpec& spec, std::uint32_t subgroup_size);

// ---- column kernels (kernel_columns.cpp) ----
// Scatters: result[o, idx, q] (+)= updates[o, k, q], the result viewed as
// (outer, n, inner) and the updates as (outer, k, inner); bindings: indices,
// updates, result (read and written; it holds the operand already). Indices
// are one per k, or with per_element one per update (shaped like them).
struct ScatterSpec {
  std::int64_t outer = 1, n = 0, k = 0, inner = 1;
  DType dtype = DType::kF32, index = DType::kI32;
  bool add = true;
  bool per_element = false;
};
Launch scatter_kernel(Context& ctx, const ScatterSpec& spec, std::uint32_t addressed);

// ---- an index array's range check on the device (Stream::add_check): indices
// outside [-n, n) (signed) or [0, n) write 1 and their value into the check's
// two words. Bindings: indices (`count` of them), the words.
Launch index_check_kernel(Context& ctx, DType index, std::int64_t n, std::int64_t count,
                          std::uint32_t addressed);

// ---- inclusive scans down each column of (outer, n, inner): op is kCumsum or
// kCumprod; bindings: input, result.
struct ScanSpec {
  Prim op = Prim::kCumsum;
  std::int64_t outer = 1, n = 0, inner = 1;
  DType dtype = DType::kF32;
  bool reverse = false;
};
Launch scan_kernel(Context& ctx, const ScanSpec& spec, std::uint32_t addressed);

// ---- argsort (kernel_sort.cpp): a bitonic network over (key, index) pairs,
// each of `lines` lines padded to m (a power of two >= n) in two u32 scratch
// arrays of lines * m. sort_keys_kernel (bindings: input, keys, indices), then
// the network's steps: sort_local_kernel for those within a chunk,
// sort_pass_kernel once per step whose partners are further apart (bindings:
// keys, indices; push words 1 and 2 are the step's j and k), then
// sort_result_kernel (bindings: indices, result i32).
struct SortSpec {
  std::int64_t lines = 1, n = 0, m = 1, inner = 1;  // the input is (lines / inner, n, inner)
  DType dtype = DType::kF32;
  bool descending = false;
};
Launch sort_keys_kernel(Context& ctx, const SortSpec& spec, std::uint32_t addressed);
Launch sort_pass_kernel(Context& ctx, const SortSpec& spec, std::uint32_t addressed);
// The steps within one chunk of sort_chunk() elements (a power of two <= m),
// in shared memory: push words 0-2 are log2 of the first k, of the first
// step's j and of the last k (bindings: keys, indices).
std::int64_t sort_chunk(const Context& ctx, const SortSpec& spec);
Launch sort_local_kernel(Context& ctx, const SortSpec& spec, std::uint32_t addressed);
Launch sort_result_kernel(Context& ctx, const SortSpec& spec, std::uint32_t addressed);

}  // namespace kiln::vk
