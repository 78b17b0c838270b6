// Primitive -> kernel lowering for eager execution on a Vulkan device.
#include "kiln/backends/vulkan/vulkan_backend.hpp"

#include <algorithm>
#include <bit>
#include <map>
#include <mutex>

#include "kiln/backends/vulkan/context.hpp"
#include "kiln/backends/vulkan/kernels.hpp"
#include "kiln/backends/vulkan/memory.hpp"
#include "kiln/backends/vulkan/stream.hpp"
#include "kiln/dsl/fusion.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::vk {
namespace {

using spv::Builder;
using spv::Ty;
using spv::Val;

// The product of shape[from, to): the outer and inner extents of the kernels
// that walk one axis (scatters, scans, argsort).
std::int64_t extent(const Shape& shape, std::size_t from, std::size_t to) {
  std::int64_t n = 1;
  for (std::size_t d = from; d < to; ++d) n *= shape[d];
  return n;
}

const VulkanBuffer& vbuf(const Array& a) {
  return static_cast<const VulkanBuffer&>(*a.buffer());
}

std::shared_ptr<VulkanBuffer> reused(Context& ctx, const Stream::Reused& r, std::size_t bytes) {
  auto buf = std::make_shared<VulkanBuffer>(ctx, r.alloc, bytes);
  buf->set_last_use(r.last_use);  // its memory is free only when that batch retires
  return buf;
}

// Memory for `bytes`. A kernel's output (`reads` are the kernel's inputs) may
// take the memory of an array that died while its commands were still pending
// (Stream::reuse); an upload, which the host writes, never does. Memory of
// dropped arrays returns to the allocator when the batches using them retire:
// on a shortage, take any pending memory that fits, else wait for the device
// once and try again.
std::shared_ptr<VulkanBuffer> allocate_bytes(Context& ctx, DType dtype, std::size_t bytes,
                                             const std::string& what,
                                             std::span<const Array> reads, bool device_written) {
  // Kernels reach arrays past one descriptor's range through their addresses;
  // bool, f16 and bf16 ones need 8- and 16-bit shader types for that.
  const auto& caps = ctx.caps();
  if (bytes > caps.max_storage_buffer_range && caps.buffer_device_address &&
      ((dtype == DType::kBool && !caps.address_int8) ||
       (dtype == DType::kF16 && !caps.address_float16) ||
       (dtype == DType::kBF16 && !caps.address_int16))) {
    throw OutOfMemoryError(detail::str_cat(
        "[vulkan] ", what, " is larger than one storage buffer can address on ",
        ctx.device().to_string(), " (maxStorageBufferRange = ", caps.max_storage_buffer_range,
        " bytes), and reaching ", name(dtype), " elements through an address needs ",
        dtype == DType::kBool  ? "shaderInt8"
        : dtype == DType::kF16 ? "shaderFloat16"
                               : "shaderInt16",
        ", which it lacks; use a 32-bit dtype or the cpu device"));
  }
  std::vector<BufferRange> ranges;
  if (device_written) {
    for (const auto& in : reads) ranges.push_back(range_of(vbuf(in)));
    if (auto r = ctx.stream().reuse(bytes, ranges, false)) return reused(ctx, *r, bytes);
  }
  Allocation a;
  try {
    a = ctx.allocator().allocate(bytes, what);
  } catch (const OutOfMemoryError&) {
    if (device_written) {
      if (auto r = ctx.stream().reuse(bytes, ranges, true)) return reused(ctx, *r, bytes);
    }
    ctx.stream().synchronize();
    a = ctx.allocator().allocate(bytes, what);
  }
  return std::make_shared<VulkanBuffer>(ctx, a, bytes);
}

// The output of a kernel reading `inputs`.
std::shared_ptr<VulkanBuffer> allocate(Context& ctx, const Aval& out, Prim p,
                                       std::span<const Array> inputs) {
  ctx.require_dtype(out.dtype, std::string(name(p)).c_str());
  const std::size_t bytes = static_cast<std::size_t>(numel(out.shape)) * size_of(out.dtype);
  return allocate_bytes(ctx, out.dtype, bytes,
                        detail::str_cat(name(p), " result ", to_string(out.shape), " ",
                                        name(out.dtype)),
                        inputs, true);
}

// A kernel's bindings: its inputs, then its outputs.
struct Bindings {
  std::vector<const VulkanBuffer*> buffers;
  std::uint32_t written = 0;  // bit i: the kernel writes buffers[i]
  Bindings(std::span<const Array> inputs, std::span<const std::shared_ptr<Buffer>> outs) {
    for (const auto& in : inputs) buffers.push_back(&vbuf(in));
    for (const auto& out : outs) {
      written |= 1u << buffers.size();
      buffers.push_back(static_cast<const VulkanBuffer*>(out.get()));
    }
  }
};

// The generators' `addressed` (kernels.hpp): the bindings larger than one
// descriptor can address.
std::uint32_t addressed(const Context& ctx, const Bindings& b) {
  std::uint32_t mask = 0;
  for (std::size_t i = 0; i < b.buffers.size(); ++i) {
    if (b.buffers[i]->nbytes() > ctx.caps().max_storage_buffer_range) mask |= 1u << i;
  }
  return mask;
}
std::uint32_t addressed(const Context& ctx, std::span<const Array> inputs,
                        std::span<const std::shared_ptr<Buffer>> outs) {
  return addressed(ctx, Bindings(inputs, outs));
}
std::uint32_t addressed(const Context& ctx, std::span<const Array> inputs,
                        const std::shared_ptr<VulkanBuffer>& out) {
  const std::shared_ptr<Buffer> outs[] = {out};
  return addressed(ctx, inputs, outs);
}

void launch(Context& ctx, const Launch& l, std::span<const Array> inputs,
            std::span<const std::shared_ptr<Buffer>> outs) {
  const Bindings b(inputs, outs);
  if (const std::uint32_t missing = addressed(ctx, b) & ~l.pipeline->addressed; missing != 0) {
    throw Error(detail::str_cat("[vulkan] internal: a kernel binds arrays larger than "
                                "maxStorageBufferRange without their addresses (mask ",
                                missing, ")"));
  }
  ctx.stream().dispatch(*l.pipeline, b.buffers, b.written, l.push, l.groups);
}

void launch(Context& ctx, const Launch& l, std::span<const Array> inputs,
            const std::shared_ptr<VulkanBuffer>& out) {
  const std::shared_ptr<Buffer> outs[] = {out};
  launch(ctx, l, inputs, outs);
}

// Where a compiled kernel keeps what its launches resolve to: its KernelCache
// (dsl/fusion.hpp), under keys of this backend: bit 61 (the CPU backend's keys
// use bits 63 and 62), the device's index (bits 40-55: a number is never
// reused for another device), what is kept (bits 32-39, kSlot*) and, for a
// launch, the addressed mask (bits 0-31: the kernel's code depends on it; the
// rest of a launch depends only on the kernel and the device's capabilities,
// which are fixed when the device is opened).
struct Keep {
  const KernelCache* cache = nullptr;  // null: nothing kept (eager calls)
  std::uint64_t key = 0;               // the device and slot bits
};
constexpr std::uint64_t kSlotPlan = 0, kSlotKernel = 1, kSlotTranspose = 2;  // + operand
constexpr std::uint64_t kSlotScatterCopy = 4;  // a scatter's copy of its operand
constexpr std::uint64_t kSlotIndexCheck = 5;   // a gather's or scatter's index check
constexpr std::uint64_t kSlotPiece = 8;  // + piece: a concatenate's copies
Keep keep_in(const KernelCache& cache, const Context& ctx, std::uint64_t slot) {
  const auto device = static_cast<std::uint64_t>(ctx.device().index) & 0xffff;
  return {&cache, std::uint64_t{1} << 61 | device << 40 | slot << 32};
}

// Launches the kernel `resolve()` returns (a Launch for the addressed mask
// `addr`) over inputs and outputs; with a Keep, the one resolved by an earlier
// call for the same mask (KeptLaunch: no spec, key or pipeline lookup on a hit).
template <class Resolve>
void launch_kept(Context& ctx, Keep keep, std::uint32_t addr, Resolve&& resolve,
                 std::span<const Array> inputs, std::span<const std::shared_ptr<Buffer>> outs) {
  if (keep.cache == nullptr) {
    launch(ctx, resolve(), inputs, outs);
    return;
  }
  const auto kept = keep.cache->get<KeptLaunch>(
      keep.key | addr, [] { return std::make_shared<const KeptLaunch>(); });
  launch(ctx, *kept->get(ctx, resolve), inputs, outs);
}
template <class Resolve>
void launch_kept(Context& ctx, Keep keep, std::uint32_t addr, Resolve&& resolve,
                 std::span<const Array> inputs, const std::shared_ptr<VulkanBuffer>& out) {
  const std::shared_ptr<Buffer> outs[] = {out};
  launch_kept(ctx, keep, addr, std::forward<Resolve>(resolve), inputs, outs);
}
// The same Keep for another launch of one step (slot `slot`), or none when the
// slot bits run out.
Keep keep_slot(Keep keep, std::uint64_t slot) {
  if (keep.cache == nullptr || slot > 0xff) return {};
  return {keep.cache, (keep.key & ~(std::uint64_t{0xff} << 32)) | slot << 32};
}

// Elementwise families: one map kernel over the output shape.
std::shared_ptr<Buffer> elementwise(Context& ctx, Prim p, const Params& params,
                                    std::span<const Array> inputs, const Aval& out,
                                    Keep keep = {}) {
  const DType in = inputs.empty() ? out.dtype : inputs.back().dtype();
  auto buf = allocate(ctx, out, p, inputs);
  if (numel(out.shape) == 0) return buf;
  for (const auto& a : inputs) ctx.require_dtype(a.dtype(), std::string(name(p)).c_str());
  const std::uint32_t addr = addressed(ctx, inputs, buf);
  launch_kept(ctx, keep, addr, [&] {
    MapSpec spec;
    spec.domain = out.shape;
    for (const auto& a : inputs) {
      spec.inputs.push_back(a.dtype());
      spec.views.push_back(broadcast_view(a.shape(), out.shape));
    }
    spec.out = out.dtype;
    spec.key = detail::str_cat(name(p), cache_key(params));
    spec.body = [&](Builder& b, MapIndex& mi) {
      std::vector<Val> args;
      for (std::size_t k = 0; k < inputs.size(); ++k) args.push_back(mi.load(k));
      return emit_elementwise(b, p, params, args, in, out.dtype);
    };
    return map_kernel(ctx, std::move(spec), addr);
  }, inputs, buf);
  return buf;
}

// A copy through views: transpose, broadcast_to, slice, one concatenate piece.
void copy_view(Context& ctx, const Array& src, const Shape& domain, View in_view,
               View out_view, const std::shared_ptr<VulkanBuffer>& out, DType dtype,
               Keep keep = {}) {
  if (numel(domain) == 0) return;
  const Array ins[] = {src};
  const std::shared_ptr<Buffer> outs[] = {out};
  const std::uint32_t addr = addressed(ctx, ins, outs);
  launch_kept(ctx, keep, addr, [&] {
    MapSpec spec;
    spec.domain = domain;
    spec.inputs = {dtype};
    spec.views = {std::move(in_view)};
    spec.out = dtype;
    spec.out_view = std::move(out_view);
    spec.key = "copy";
    spec.body = [](Builder&, MapIndex& mi) { return mi.load(0); };
    return map_kernel(ctx, std::move(spec), addr);
  }, ins, outs);
}

// The view of an array of `shape` that walks it transposed by `perm`.
View transpose_view(const Shape& shape, std::span<const std::int64_t> perm) {
  const Shape own = contiguous_strides(shape);
  View v;
  for (auto axis : perm) v.strides.push_back(own[static_cast<std::size_t>(axis)]);
  return v;
}

std::shared_ptr<Buffer> layout(Context& ctx, Prim p, const Params& params,
                               std::span<const Array> inputs, const Aval& out, Keep keep = {}) {
  if (p == Prim::kReshape) return inputs[0].buffer();  // row-major bytes unchanged
  auto buf = allocate(ctx, out, p, inputs);
  const Array& a = inputs[0];
  visit_family<PrimFamily::kLayout>(p, [&]<Prim P>(PrimC<P>) {
    const auto& q = params.as<ParamsOf<P>>();
    if constexpr (P == Prim::kReshape) {
      // handled above: no copy
    } else if constexpr (P == Prim::kTranspose) {
      copy_view(ctx, a, out.shape, transpose_view(a.shape(), q.perm), {}, buf, out.dtype, keep);
    } else if constexpr (P == Prim::kBroadcastTo) {
      copy_view(ctx, a, out.shape, broadcast_view(a.shape(), out.shape), {}, buf,
                out.dtype, keep);
    } else if constexpr (P == Prim::kSlice) {
      const Shape own = contiguous_strides(a.shape());
      View v;
      for (std::size_t d = 0; d < own.size(); ++d) {
        v.offset += q.starts[d] * own[d];
        v.strides.push_back(q.steps[d] * own[d]);
      }
      copy_view(ctx, a, out.shape, v, {}, buf, out.dtype, keep);
    } else if constexpr (P == Prim::kConcatenate) {
      const auto axis = static_cast<std::size_t>(q.axis);
      const Shape ostr = contiguous_strides(out.shape);
      std::int64_t at = 0;
      for (std::size_t i = 0; i < inputs.size(); ++i) {  // a launch per piece, each kept apart
        const Array& part = inputs[i];
        View ov{at * ostr[axis], ostr};
        copy_view(ctx, part, part.shape(), View{0, contiguous_strides(part.shape())}, ov,
                  buf, out.dtype, keep_slot(keep, kSlotPiece + i));
        at += part.shape()[axis];
      }
    } else {
      static_assert(kUnhandled<P>, "a layout primitive without a Vulkan kernel");
    }
  });
  return buf;
}

std::shared_ptr<Buffer> reduce(Context& ctx, Prim p, const Params& params,
                               std::span<const Array> inputs, const Aval& out, Keep keep = {}) {
  const Array& a = inputs[0];
  ctx.require_dtype(a.dtype(), std::string(name(p)).c_str());
  auto buf = allocate(ctx, out, p, inputs);
  if (numel(out.shape) == 0) return buf;
  const std::uint32_t addr = addressed(ctx, inputs, buf);
  launch_kept(ctx, keep, addr, [&] {
    return reduce_kernel(ctx, reduce_spec(p, params, a.shape(), a.dtype(), out.dtype), addr);
  }, inputs, buf);
  return buf;
}

std::shared_ptr<Buffer> scan(Context& ctx, Prim p, const Params& params,
                             std::span<const Array> inputs, const Aval& out) {
  const Array& a = inputs[0];
  ctx.require_dtype(a.dtype(), std::string(name(p)).c_str());
  auto buf = allocate(ctx, out, p, inputs);
  if (numel(out.shape) == 0) return buf;
  const auto& q = params.as<ScanParams>();
  const auto axis = static_cast<std::size_t>(q.axis);
  ScanSpec s;
  s.op = p;
  s.n = a.shape()[axis];
  s.outer = extent(a.shape(), 0, axis);
  s.inner = extent(a.shape(), axis + 1, a.shape().size());
  s.dtype = a.dtype();
  s.reverse = q.reverse;
  launch(ctx, scan_kernel(ctx, s, addressed(ctx, inputs, buf)), inputs, buf);
  return buf;
}

// argsort: keys, the bitonic passes, the result (kernel_sort.cpp).
std::shared_ptr<Buffer> argsort(Context& ctx, const Params& params, std::span<const Array> inputs,
                                const Aval& out) {
  const Array& a = inputs[0];
  ctx.require_dtype(a.dtype(), "argsort");
  auto buf = allocate(ctx, out, Prim::kArgsort, inputs);
  if (numel(out.shape) == 0) return buf;
  const auto& q = params.as<SortParams>();
  const auto axis = static_cast<std::size_t>(q.axis);
  SortSpec s;
  s.n = a.shape()[axis];
  s.inner = extent(a.shape(), axis + 1, a.shape().size());
  s.lines = a.size() / s.n;
  while (s.m < s.n) s.m *= 2;
  s.m = std::max<std::int64_t>(s.m, 2);
  s.dtype = a.dtype();
  s.descending = q.descending;
  const Aval scratch{DType::kU32, Shape{s.lines * s.m}};
  const Array keys(DType::kU32, scratch.shape, allocate(ctx, scratch, Prim::kArgsort, inputs));
  const Array idx(DType::kU32, scratch.shape, allocate(ctx, scratch, Prim::kArgsort, inputs));
  const std::shared_ptr<Buffer> pair[] = {keys.buffer(), idx.buffer()};
  launch(ctx, sort_keys_kernel(ctx, s, addressed(ctx, inputs, pair)), inputs, pair);
  Launch pass = sort_pass_kernel(ctx, s, addressed(ctx, {}, pair));
  pass.push.resize(3);
  Launch within = sort_local_kernel(ctx, s, addressed(ctx, {}, pair));
  const std::int64_t chunk = sort_chunk(ctx, s);
  const auto log2 = [](std::int64_t x) { return static_cast<std::uint32_t>(std::countr_zero(static_cast<std::uint64_t>(x))); };
  within.push = {1, 0, log2(chunk)};  // every step of k = 2 .. chunk
  launch(ctx, within, {}, pair);
  for (std::int64_t k = chunk * 2; k <= s.m; k *= 2) {
    for (std::int64_t j = k / 2; j >= chunk; j /= 2) {
      pass.push[1] = static_cast<std::uint32_t>(j);
      pass.push[2] = static_cast<std::uint32_t>(k);
      launch(ctx, pass, {}, pair);
    }
    within.push = {log2(k), log2(chunk / 2), log2(k)};  // k's steps j < chunk
    launch(ctx, within, {}, pair);
  }
  const Array order[] = {idx};
  launch(ctx, sort_result_kernel(ctx, s, addressed(ctx, order, buf)), order, buf);
  return buf;
}

std::shared_ptr<Buffer> matmul(Context& ctx, std::span<const Array> inputs, const Aval& out,
                               Keep keep = {}) {
  const Array& a = inputs[0];
  const Array& b = inputs[1];
  ctx.require_dtype(a.dtype(), "matmul");
  auto buf = allocate(ctx, out, Prim::kMatmul, inputs);
  if (numel(out.shape) == 0) return buf;
  const MatmulSpec s = matmul_spec(a.shape(), b.shape(), out);
  if (s.k == 0) {  // an empty sum: zeros
    const std::uint32_t addr = addressed(ctx, {}, buf);
    launch_kept(ctx, keep, addr, [&] {
      MapSpec z;
      z.domain = out.shape;
      z.out = out.dtype;
      z.key = "zeros";
      z.body = [&](Builder& bb, MapIndex&) { return bb.constant(spv::compute_type(out.dtype), 0); };
      return map_kernel(ctx, std::move(z), addr);
    }, {}, buf);
    return buf;
  }
  const std::uint32_t addr = addressed(ctx, inputs, buf);
  launch_kept(ctx, keep, addr, [&] { return matmul_kernel(ctx, s, addr); }, inputs, buf);
  return buf;
}

// Index values decide which elements are read, so they are checked on the host
// first (as on the CPU: an IndexError leaves no partial result).
std::string index_fault(Prim p, std::int64_t i, std::int64_t axis, std::int64_t n) {
  return detail::str_cat("[", name(p), "] index ", i, " is out of range for axis ", axis,
                         " of size ", n);
}

// Indices outside [-n, n) are an IndexError. Eagerly the indices are read and
// checked before the op (the error comes from the call). In a compiled program
// (`keep`) that would be a host round trip inside the step: there a kernel
// checks them on the device and the error comes from the next synchronisation
// (Stream::add_check), while the gather clamps and the scatter drops what is
// out of range, so no access leaves the arrays; the call has then run with the
// clamped indices (what JAX computes, without an error) and consumed what was
// donated to it. KILN_VK_SYNC_INDEX_CHECKS=1 checks on the host in programs too:
// the call throws before its kernels run and its arguments keep their values.
void check_indices(Context& ctx, Prim p, const Array& indices, std::int64_t axis, std::int64_t n,
                   Keep keep) {
  if (keep.cache != nullptr && indices.size() > 0 && !ctx.quirks().sync_index_checks) {
    const bool is_signed = indices.dtype() == DType::kI32;
    auto words = ctx.stream().add_check([=](std::uint32_t v) {
      const std::int64_t i = is_signed ? std::int64_t{static_cast<std::int32_t>(v)} : std::int64_t{v};
      return detail::str_cat(index_fault(p, i, axis, n),
                             " (checked on the device in a compiled program; reported at the "
                             "synchronisation after the call)");
    });
    if (words) {
      const std::shared_ptr<Buffer> faults[] = {std::move(words)};
      const Array reads[] = {indices};
      const std::uint32_t addr = addressed(ctx, reads, faults);
      launch_kept(ctx, keep_slot(keep, kSlotIndexCheck), addr, [&] {
        return index_check_kernel(ctx, indices.dtype(), n, indices.size(), addr);
      }, reads, faults);
      return;
    }
  }
  std::vector<std::int64_t> v;
  if (indices.dtype() == DType::kI32) {
    for (auto x : indices.to_vector<std::int32_t>()) v.push_back(x);
  } else {
    for (auto x : indices.to_vector<std::uint32_t>()) v.push_back(x);
  }
  for (auto i : v) {
    if (i < -n || i >= n) throw IndexError(index_fault(p, i, axis, n));
  }
}

// index in [-n, n) -> [0, n) as u32.
Val wrap_index(Builder& b, const Val& idx, std::int64_t n) {
  if (!spv::is_signed(idx.ty)) return idx;
  Val neg = b.op("OpSLessThan", Ty::kBool, {idx, b.constant(Ty::kI32, 0)});
  Val u = b.bitcast(idx, Ty::kU32);
  return b.select(neg, b.op("OpIAdd", Ty::kU32, {u, b.u32(static_cast<std::uint32_t>(n))}), u);
}

std::shared_ptr<Buffer> scatter(Context& ctx, Prim p, const AxisParams& params,
                                std::span<const Array> inputs, const Aval& out, Keep keep = {});

// A scatter-add of f16/bf16 through f32 copies, rounded once: the kernel sums
// repeated indices in the result's memory, which would round every partial
// sum to 16 bits (the CPU, like every other primitive, rounds once).
std::shared_ptr<Buffer> scatter_add_in_f32(Context& ctx, Prim p, const AxisParams& params,
                                           std::span<const Array> inputs, const Aval& out) {
  const auto convert = [&](const Array& x, DType to) {
    const Aval wide{to, x.shape()};
    return Array(to, x.shape(),
                 elementwise(ctx, Prim::kAstype, Params(DTypeParams{to}), {&x, 1}, wide));
  };
  const Array wide[] = {convert(inputs[0], DType::kF32), inputs[1],
                        convert(inputs[2], DType::kF32)};
  const Aval wide_out{DType::kF32, out.shape};
  const Array sum(DType::kF32, out.shape, scatter(ctx, p, params, wide, wide_out));
  return elementwise(ctx, Prim::kAstype, Params(DTypeParams{out.dtype}), {&sum, 1}, out);
}

// The scatters: the operand copied into the result, then scatter_kernel (two
// launches, kept apart; the 16-bit scatter-adds keep none).
std::shared_ptr<Buffer> scatter(Context& ctx, Prim p, const AxisParams& params,
                                std::span<const Array> inputs, const Aval& out, Keep keep) {
  if (p != Prim::kScatter && is_16bit_float(out.dtype)) {
    return scatter_add_in_f32(ctx, p, params, inputs, out);
  }
  const Array& a = inputs[0];
  const Array& idx = inputs[1];
  const Array& upd = inputs[2];
  const std::int64_t ax = params.axis;
  const auto axis = static_cast<std::size_t>(ax);
  ScatterSpec s;
  s.n = a.shape()[axis];
  check_indices(ctx, p, idx, ax, s.n, keep);
  auto buf = allocate(ctx, out, p, inputs);
  if (numel(out.shape) == 0) return buf;
  // The operand first, by a parallel copy (the scatter's parallelism is its
  // columns only).
  copy_view(ctx, a, a.shape(), View{0, contiguous_strides(a.shape())}, {}, buf, out.dtype,
            keep_slot(keep, kSlotScatterCopy));
  s.outer = extent(a.shape(), 0, axis);
  s.inner = extent(a.shape(), axis + 1, a.shape().size());
  s.k = upd.size() / (s.outer * s.inner);
  if (s.k == 0) return buf;
  s.dtype = out.dtype;
  s.index = idx.dtype();
  s.add = p != Prim::kScatter;
  s.per_element = p == Prim::kScatterAddAlongAxis;
  const Array reads[] = {idx, upd};
  const std::uint32_t addr = addressed(ctx, reads, buf);
  launch_kept(ctx, keep, addr, [&] { return scatter_kernel(ctx, s, addr); }, reads, buf);
  return buf;
}

// A map over `out` keeping its dims (the index kernels' bodies read them).
MapSpec index_map(const Aval& out, std::string key) {
  MapSpec spec;
  spec.domain = out.shape;
  spec.out = out.dtype;
  spec.collapse = false;
  spec.key = std::move(key);
  return spec;
}

// Out-of-range indices leave their row all zero.
std::shared_ptr<Buffer> one_hot(Context& ctx, const OneHotParams& params,
                                std::span<const Array> inputs, const Aval& out, Keep keep = {}) {
  auto buf = allocate(ctx, out, Prim::kOneHot, inputs);
  if (numel(out.shape) == 0) return buf;
  const std::uint32_t addr = addressed(ctx, inputs, buf);
  launch_kept(ctx, keep, addr, [&] {
    MapSpec spec = index_map(out, detail::str_cat("one_hot", cache_key(params)));
    const Array& idx = inputs[0];
    spec.inputs = {idx.dtype()};
    View iv{0, contiguous_strides(idx.shape())};
    iv.strides.push_back(0);
    spec.views = {iv};
    const std::size_t last = out.shape.size() - 1;
    spec.body = [&, last](Builder& b, MapIndex& mi) {
      Val i = mi.load(0);
      Val d = mi.dim(last);
      Val hit = spv::is_signed(i.ty)
                    ? b.op("OpIEqual", Ty::kBool, {i, b.bitcast(d, Ty::kI32)})
                    : b.op("OpIEqual", Ty::kBool, {i, d});
      const Ty t = spv::compute_type(out.dtype);
      return b.select(hit, b.constant(t, 1), b.constant(t, 0));
    };
    return map_kernel(ctx, std::move(spec), addr);
  }, inputs, buf);
  return buf;
}

// take, take_along_axis: a map over the result reading the operand at the index.
std::shared_ptr<Buffer> gather(Context& ctx, Prim p, const AxisParams& params,
                               std::span<const Array> inputs, const Aval& out, Keep keep = {}) {
  auto buf = allocate(ctx, out, p, inputs);
  if (numel(out.shape) == 0) return buf;
  const auto axis = static_cast<std::size_t>(params.axis);
  const Array& a = inputs[0];
  const Array& idx = inputs[1];
  const std::int64_t n = a.shape()[axis];
  check_indices(ctx, p, idx, params.axis, n, keep);  // the values: on every call, kept or not
  const std::uint32_t addr = addressed(ctx, inputs, buf);
  launch_kept(ctx, keep, addr, [&] {
    MapSpec spec = index_map(out, detail::str_cat(name(p), cache_key(params)));
    spec.inputs = {a.dtype(), idx.dtype()};
    const Shape astr = contiguous_strides(a.shape());
    const std::int64_t axis_stride = astr[axis];
    // The body bakes in the axis length (negative indices wrap by it) and stride.
    spec.key += detail::str_cat("/n=", n, "/stride=", axis_stride);
    if (p == Prim::kTake) {
      // out dims: a[:axis] ++ idx.shape ++ a[axis+1:]
      const std::size_t ir = idx.shape().size();
      View av, iv;
      if (out.shape.empty()) {  // a 0-d index into a vector: one element
        spec.domain = {1};
        av.strides = {0};
        iv.strides = {0};
      }
      for (std::size_t d = 0; d < out.shape.size(); ++d) {
        if (d < axis) {
          av.strides.push_back(astr[d]);
          iv.strides.push_back(0);
        } else if (d < axis + ir) {
          av.strides.push_back(0);
          iv.strides.push_back(contiguous_strides(idx.shape())[d - axis]);
        } else {
          av.strides.push_back(astr[d - ir + 1]);
          iv.strides.push_back(0);
        }
      }
      spec.views = {av, iv};
    } else {  // take_along_axis: non-axis dims broadcast
      View av = broadcast_view(a.shape(), out.shape);
      av.strides[axis] = 0;
      View iv = broadcast_view(idx.shape(), out.shape);
      spec.views = {av, iv};
    }
    spec.body = [&, n, axis_stride](Builder& b, MapIndex& mi) {
      // (An index out of range is an error from the check; a compiled
      // program's device check reports it later, so clamp meanwhile.)
      Val i = b.glsl("UMin", Ty::kU32, {wrap_index(b, mi.load(1), n), b.u32(static_cast<std::uint32_t>(n - 1))});
      Val off = b.op("OpIAdd", Ty::kU32,
                     {mi.offset(0), b.op("OpIMul", Ty::kU32,
                                         {i, b.u32(static_cast<std::uint32_t>(axis_stride))})});
      return mi.load_at(0, off);
    };
    return map_kernel(ctx, std::move(spec), addr);
  }, inputs, buf);
  return buf;
}

// unfold and fold: one map kernel over the result (kernel_window.cpp).
std::shared_ptr<Buffer> window(Context& ctx, Prim p, const Params& params,
                               std::span<const Array> inputs, const Aval& out, Keep keep = {}) {
  ctx.require_dtype(out.dtype, std::string(name(p)).c_str());
  auto buf = allocate(ctx, out, p, inputs);
  if (numel(out.shape) == 0) return buf;
  const std::uint32_t addr = addressed(ctx, inputs, buf);
  launch_kept(ctx, keep, addr, [&] {
    return map_kernel(ctx, window_spec(p, params.as<WindowParams>(), out.dtype, out), addr);
  }, inputs, buf);
  return buf;
}

std::shared_ptr<Buffer> index(Context& ctx, Prim p, const Params& params,
                              std::span<const Array> inputs, const Aval& out, Keep keep = {}) {
  return visit_family<PrimFamily::kIndex>(p, [&]<Prim P>(PrimC<P>) {
    const auto& q = params.as<ParamsOf<P>>();
    if constexpr (P == Prim::kScatter || P == Prim::kScatterAdd ||
                  P == Prim::kScatterAddAlongAxis) {
      return scatter(ctx, P, q, inputs, out, keep);
    } else if constexpr (P == Prim::kOneHot) {
      return one_hot(ctx, q, inputs, out, keep);
    } else if constexpr (P == Prim::kTake || P == Prim::kTakeAlongAxis) {
      return gather(ctx, P, q, inputs, out, keep);
    } else {
      static_assert(kUnhandled<P>, "an index primitive without a Vulkan kernel");
    }
  });
}

}  // namespace

Device VulkanBackend::device() const { return ctx_.device(); }

namespace {

// `a` with its last two axes swapped, materialised (matmul operands the
// compiler marked transposed: the kernels read row-major operands), with the
// copy's launch kept in `keep` when given.
Array transposed_last_two(Context& ctx, const Array& a, Keep keep = {}) {
  Aval ta = a.aval();
  const std::size_t r = ta.shape.size();
  std::vector<std::int64_t> perm;
  for (std::size_t i = 0; i < r; ++i) perm.push_back(static_cast<std::int64_t>(i));
  std::swap(perm[r - 2], perm[r - 1]);
  std::swap(ta.shape[r - 2], ta.shape[r - 1]);
  auto buf = allocate(ctx, ta, Prim::kTranspose, {&a, 1});
  copy_view(ctx, a, ta.shape, transpose_view(a.shape(), perm), {}, buf, ta.dtype, keep);
  return Array(ta.dtype, ta.shape, std::move(buf));
}

// What eval_fused resolves for a kernel on a device on its first call, kept in
// the kernel's KernelCache (slot kSlotPlan) so later calls skip it.
struct FusedPlan {
  // An epilogue whose matmul reads a transposed operand runs as `plain`: the
  // same kernel over the materialised transposes of inputs[transposed[j]],
  // appended to the inputs in that order (the epilogue may read the stored
  // operand too). Kept here, so its own KernelCache lives as long as `k`'s.
  std::shared_ptr<const FusedKernel> plain;
  std::vector<std::size_t> transposed;
  bool unfused = false;            // Backend::eval_fused (bindings, edge cases)
  std::vector<std::size_t> order;  // fused_inputs(k)
  std::vector<Prim> producers;     // of each output (allocation messages)
};

FusedPlan plan_fused(const Context& ctx, const FusedKernel& k) {
  FusedPlan plan;
  const Program& body = k.body;
  if (k.kind == FusedKernel::Kind::kMatmulEpilogue) {
    const Equation& mm = body.equations.front();
    if (const auto& q = mm.params.as<MatmulParams>(); q.transpose_a || q.transpose_b) {
      auto plain = std::make_shared<FusedKernel>(k);
      Equation& e = plain->body.equations.front();
      for (int side = 0; side < 2; ++side) {
        auto& eq_params = e.params.as<MatmulParams>();
        bool& flag = side == 0 ? eq_params.transpose_a : eq_params.transpose_b;
        if (!flag) continue;
        const ValueId operand = e.inputs[side];
        plan.transposed.push_back(static_cast<std::size_t>(
            std::find(body.inputs.begin(), body.inputs.end(), operand) - body.inputs.begin()));
        Aval t = body.avals[operand];
        std::swap(t.shape[t.shape.size() - 2], t.shape[t.shape.size() - 1]);
        const ValueId v = plain->body.new_value(t);
        plain->body.inputs.push_back(v);
        e.inputs[side] = v;
        flag = false;
      }
      plan.plain = std::move(plain);
      return plan;
    }
  }
  // The unfused path's capability errors: every value is an array there.
  for (const Equation& eq : body.equations) {
    const std::string what(name(eq.prim));
    for (ValueId in : eq.inputs) ctx.require_dtype(body.avals[in].dtype, what.c_str());
    ctx.require_dtype(body.avals[eq.output].dtype, what.c_str());
  }
  plan.order = fused_inputs(k);
  // Unfused (one kernel per equation): the implicit-GEMM kinds (fuses_windows
  // is false, so only a hand-made kernel has them), more operands than a kernel binds, and
  // the anchors' edge cases: empty shapes (a sum over an empty axis still has
  // values), matmul over k == 0 (zeros).
  plan.unfused =
      k.kind == FusedKernel::Kind::kUnfoldMatmul || k.kind == FusedKernel::Kind::kMatmulFold ||
      plan.order.size() + body.outputs.size() > ctx.caps().max_bindings ||
      (k.kind != FusedKernel::Kind::kElementwise && numel(k.shape) == 0) ||
      (k.kind == FusedKernel::Kind::kMatmulEpilogue &&
       body.avals[body.equations[0].inputs[0]].shape.back() == 0);
  for (ValueId v : body.outputs) {
    Prim p = Prim::kAdd;
    for (const Equation& eq : body.equations) {
      if (eq.output == v) p = eq.prim;
    }
    plan.producers.push_back(p);
  }
  return plan;
}

}  // namespace

// These families' handlers are one kernel each (argsort, matmul): a second
// primitive in one needs its own case there first.
static_assert(prims_in(PrimFamily::kSort) == 1 && prims_in(PrimFamily::kMatmul) == 1,
              "a family the Vulkan backend handles with a single kernel grew a primitive");

std::shared_ptr<Buffer> VulkanBackend::eval(Prim p, const Params& params,
                                            std::span<const Array> inputs,
                                            const Aval& out) {
  return run(p, params, inputs, out, nullptr);
}

std::shared_ptr<Buffer> VulkanBackend::eval_step(Prim p, const Params& params,
                                                 std::span<const Array> inputs, const Aval& out,
                                                 const KernelCache& keep) {
  return run(p, params, inputs, out, &keep);
}

// `cache`: a compiled step's (eval_step), where the launches of the families
// with a fixed set of launches are kept (launch_kept), each in its own slot;
// null for an eager call. The others (scan, argsort, the 16-bit scatter-adds)
// look their kernels up on every call.
std::shared_ptr<Buffer> VulkanBackend::run(Prim p, const Params& params,
                                           std::span<const Array> inputs, const Aval& out,
                                           const KernelCache* cache) {
  const Keep keep = cache != nullptr ? keep_in(*cache, ctx_, kSlotKernel) : Keep{};
  switch (family(p)) {
    case PrimFamily::kUnary:
    case PrimFamily::kBinary:
    case PrimFamily::kWhere:
    case PrimFamily::kAstype:
      return elementwise(ctx_, p, params, inputs, out, keep);
    case PrimFamily::kReduce:
    case PrimFamily::kArgReduce:
      return reduce(ctx_, p, params, inputs, out, keep);
    case PrimFamily::kMatmul:
      if (const auto& q = params.as<MatmulParams>(); q.transpose_a || q.transpose_b) {
        // The kernel reads row-major operands: materialise the transposed ones.
        Array ops[2] = {inputs[0], inputs[1]};
        if (q.transpose_a) ops[0] = transposed_last_two(ctx_, ops[0], keep_slot(keep, kSlotTranspose));
        if (q.transpose_b) {
          ops[1] = transposed_last_two(ctx_, ops[1], keep_slot(keep, kSlotTranspose + 1));
        }
        return matmul(ctx_, ops, out, keep);
      }
      return matmul(ctx_, inputs, out, keep);
    case PrimFamily::kLayout:
      return layout(ctx_, p, params, inputs, out, keep);
    case PrimFamily::kWindow:
      return window(ctx_, p, params, inputs, out, keep);
    case PrimFamily::kIndex:
      return index(ctx_, p, params, inputs, out, keep);
    case PrimFamily::kScan:
      return scan(ctx_, p, params, inputs, out);
    case PrimFamily::kSort:
      return argsort(ctx_, params, inputs, out);
    case PrimFamily::kCreation:
      return visit_family<PrimFamily::kCreation>(p, [&]<Prim P>(PrimC<P>) {
        if constexpr (P == Prim::kFull) {
          return elementwise(ctx_, p, params, inputs, out);
        } else if constexpr (P == Prim::kArange) {
          // start + i * step in double, as the CPU computes it.
          return from_host(Array(out.dtype, out.shape,
                                 backend_for(Device::cpu()).eval(p, params, inputs, out)))
              .buffer();
        } else {
          static_assert(kUnhandled<P>, "a creation primitive without a Vulkan kernel");
        }
      });
    case PrimFamily::kIdentity:
      return inputs[0].buffer();
    case PrimFamily::kControl:
      detail::control_reached_backend(p);
  }
  return nullptr;
}

std::vector<std::shared_ptr<Buffer>> VulkanBackend::eval_fused(
    const FusedKernel& k, std::span<const Array> inputs,
    std::span<const std::shared_ptr<Buffer>> into) {
  // Planned on the kernel's first call on this device; a hit plans nothing.
  const std::shared_ptr<const FusedPlan> plan = k.cache.get<FusedPlan>(
      keep_in(k.cache, ctx_, kSlotPlan).key,
      [&] { return std::make_shared<const FusedPlan>(plan_fused(ctx_, k)); });
  if (plan->plain) {
    // As eval: materialise transposed operands (their copies' launches kept
    // too), then the plain kernel.
    std::vector<Array> args(inputs.begin(), inputs.end());
    for (std::size_t j = 0; j < plan->transposed.size(); ++j) {
      args.push_back(transposed_last_two(ctx_, inputs[plan->transposed[j]],
                                         keep_in(k.cache, ctx_, kSlotTranspose + j)));
    }
    return eval_fused(*plan->plain, args, into);
  }
  if (plan->unfused) return Backend::eval_fused(k, inputs, into);
  const Program& body = k.body;
  const bool elementwise = k.kind == FusedKernel::Kind::kElementwise;
  std::vector<std::shared_ptr<Buffer>> outs;
  for (std::size_t o = 0; o < body.outputs.size(); ++o) {
    // In place only for elementwise kernels: a matmul reads other elements of
    // its operands while the epilogue stores.
    if (elementwise && o < into.size() && into[o] != nullptr) {
      outs.push_back(into[o]);
      continue;
    }
    outs.push_back(allocate(ctx_, body.avals[body.outputs[o]], plan->producers[o], inputs));
  }
  if (numel(k.shape) == 0) return outs;
  std::vector<Array> args;
  for (std::size_t i : plan->order) args.push_back(inputs[i]);
  const std::uint32_t addr = addressed(ctx_, args, outs);
  // Each addressed operand takes 8 bytes of push constants (the generators' own
  // words take at most 8 more): past what the device holds, run unfused.
  const auto room = (ctx_.caps().max_push_constants_size - 8) / 8;
  if (static_cast<std::uint32_t>(std::popcount(addr)) > room) {
    return Backend::eval_fused(k, inputs, into);
  }
  launch_kept(ctx_, keep_in(k.cache, ctx_, kSlotKernel), addr,
              [&] { return fused_kernel(ctx_, k, addr); }, args, outs);
  return outs;
}

void VulkanBackend::begin_program() { ctx_.stream().begin_program(); }

void VulkanBackend::end_program() { ctx_.stream().end_program(); }

Array VulkanBackend::from_host(const Array& host) {
  ctx_.require_dtype(host.dtype(), "to_device");
  const std::size_t bytes = host.nbytes();
  std::string what = detail::str_cat("array ", to_string(host.shape()), " ",
                                     name(host.dtype()));
  auto buf = allocate_bytes(ctx_, host.dtype(), bytes, what, {}, false);
  const void* src = const_cast<Buffer&>(*host.buffer()).host_data();
  ctx_.stream().upload(*buf, src);
  return Array(host.dtype(), host.shape(), std::move(buf));
}

namespace {
struct Backends {
  std::mutex mu;
  std::map<int, std::unique_ptr<VulkanBackend>> by_index;
};
Backends& backends() {
  static auto* b = new Backends();
  return *b;
}
}  // namespace

VulkanBackend& backend(int index) {
  check_not_forked();
  Backends& b = backends();
  std::lock_guard lock(b.mu);
  auto& slot = b.by_index[index];
  if (!slot) slot = std::make_unique<VulkanBackend>(Context::get(index));
  return *slot;
}

void forget_backend(int index) {
  Backends& b = backends();
  std::lock_guard lock(b.mu);
  b.by_index.erase(index);
}

}  // namespace kiln::vk
