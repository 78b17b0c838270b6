// Map kernels: one invocation per element of an iteration domain, reading
// operands through strided views (broadcast, transpose, slice, concatenate are
// all views) and writing through one. Dims that every view walks contiguously
// are merged first, so an elementwise op on equal shapes is a rank-1 kernel whose
// only parameter is the element count.
#include <algorithm>
#include <optional>

#include "kiln/backends/vulkan/context.hpp"
#include "kiln/backends/vulkan/kernels.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::vk {

using spv::Builder;
using spv::Ty;
using spv::Val;

VkFormat texel_format(DType d) {
  switch (d) {
    case DType::kI32: return VK_FORMAT_R32G32B32A32_SINT;
    case DType::kU32: return VK_FORMAT_R32G32B32A32_UINT;
    default: return VK_FORMAT_R32G32B32A32_SFLOAT;
  }
}

Shape contiguous_strides(const Shape& shape) {
  Shape s(shape.size(), 1);
  for (std::size_t d = shape.size(); d-- > 1;) s[d - 1] = s[d] * shape[d];
  return s;
}

View broadcast_view(const Shape& shape, const Shape& domain) {
  View v;
  v.strides.assign(domain.size(), 0);
  const Shape own = contiguous_strides(shape);
  const std::size_t lead = domain.size() - shape.size();
  for (std::size_t d = 0; d < shape.size(); ++d) {
    v.strides[lead + d] = shape[d] == 1 ? 0 : own[d];
  }
  return v;
}

KeptLaunch::Held KeptLaunch::find(Context& ctx) const {
  Held h;
  {
    std::lock_guard lock(mu_);
    h.launch = launch_;
    h.pipeline = pipeline_.lock();
  }
  if (!h.launch || !h.pipeline || !ctx.pipelines().touch(*h.pipeline)) return {};
  return h;
}

KeptLaunch::Held KeptLaunch::keep(Launch l) const {
  Held h;
  h.pipeline = l.pipeline->shared_from_this();
  h.launch = std::make_shared<const Launch>(std::move(l));
  std::lock_guard lock(mu_);
  launch_ = h.launch;
  pipeline_ = h.pipeline;
  return h;
}

std::uint32_t local_size(const Context& ctx) {
  return std::min<std::uint32_t>(256, ctx.caps().max_invocations);
}

std::array<std::uint32_t, 3> grid_for(const Context& ctx, std::uint64_t groups,
                                      const char* what) {
  const auto& max = ctx.caps().max_group_count;
  if (groups <= max[0]) return {static_cast<std::uint32_t>(std::max<std::uint64_t>(groups, 1)), 1, 1};
  const std::uint64_t gy = (groups + max[0] - 1) / max[0];
  if (gy > max[1]) {
    throw DeviceError(detail::str_cat("[", what, "] needs ", groups,
                                      " workgroups, more than a 2-D grid of ",
                                      ctx.device().to_string(), " holds"));
  }
  return {max[0], static_cast<std::uint32_t>(gy), 1};
}

Val MapIndex::offset(std::size_t input) const {
  const View& v = (*views)[input];
  Val off = b->u32(static_cast<std::uint32_t>(v.offset));
  if (dims.empty()) {  // collapsed rank-1 domain
    if (v.strides.empty() || v.strides[0] == 0) return off;
    Val scaled = v.strides[0] == 1
                     ? linear
                     : b->op("OpIMul", Ty::kU32,
                             {linear, b->u32(static_cast<std::uint32_t>(v.strides[0]))});
    return v.offset == 0 ? scaled : b->op("OpIAdd", Ty::kU32, {off, scaled});
  }
  for (std::size_t d = 0; d < dims.size(); ++d) {
    if (v.strides[d] == 0) continue;
    Val term = v.strides[d] == 1
                   ? dims[d]
                   : b->op("OpIMul", Ty::kU32,
                           {dims[d], b->u32(static_cast<std::uint32_t>(v.strides[d]))});
    off = b->op("OpIAdd", Ty::kU32, {off, term});
  }
  return off;
}

Val MapIndex::load(std::size_t input) const {
  if (lanes != nullptr) return (*lanes)[input][lane];
  return b->load(static_cast<int>(input), offset(input));
}

Val MapIndex::load_at(std::size_t input, const Val& off) const {
  return b->load(static_cast<int>(input), off);
}

namespace {

// Merges dim d into d+1 wherever every view walks them as one; drops size-1 dims.
void collapse(Shape& domain, std::vector<View*> views) {
  Shape nd;
  std::vector<Shape> ns(views.size());
  for (std::size_t d = 0; d < domain.size(); ++d) {
    if (domain[d] == 1) continue;
    bool merge = !nd.empty();
    for (std::size_t k = 0; merge && k < views.size(); ++k) {
      merge = ns[k].back() == views[k]->strides[d] * domain[d];
    }
    if (merge) {
      nd.back() *= domain[d];
      for (std::size_t k = 0; k < views.size(); ++k) ns[k].back() = views[k]->strides[d];
    } else {
      nd.push_back(domain[d]);
      for (std::size_t k = 0; k < views.size(); ++k) ns[k].push_back(views[k]->strides[d]);
    }
  }
  if (nd.empty()) {
    nd.push_back(1);
    for (auto& s : ns) s.push_back(0);
  }
  domain = nd;
  for (std::size_t k = 0; k < views.size(); ++k) views[k]->strides = ns[k];
}

std::string view_key(const View& v) {
  return detail::str_cat(v.offset, ":", detail::join(v.strides, ","));
}

}  // namespace

Launch map_kernel(Context& ctx, MapSpec spec, std::uint32_t addressed) {
  const std::int64_t n = numel(spec.domain);
  if (spec.outs.empty()) {  // one output: the single-body form
    spec.outs = {spec.out};
    spec.multi_body = [body = std::move(spec.body)](Builder& b, MapIndex& mi) {
      return std::vector<Val>{body(b, mi)};
    };
  }
  if (spec.out_view.strides.empty()) spec.out_view.strides = contiguous_strides(spec.domain);
  if (spec.collapse) {
    std::vector<View*> all;
    for (auto& v : spec.views) all.push_back(&v);
    all.push_back(&spec.out_view);
    collapse(spec.domain, all);
  }
  const bool rank1 = spec.collapse && spec.domain.size() == 1;
  // A rank-1 kernel with unit/zero strides and no offsets serves every size.
  bool generic_size = rank1 && spec.out_view.offset == 0 && spec.out_view.strides[0] == 1;
  for (const auto& v : spec.views) {
    generic_size = generic_size && v.offset == 0 && v.strides[0] <= 1;
  }
  // Contiguous 32-bit kernels move 16 bytes per load and store (4 elements per
  // invocation) when the count allows; CPU implementations turn per-lane scalar
  // loads into gathers, and GPUs like wide accesses too. Where
  // Capabilities::wide_loads says each access is a loop over the SIMD lanes,
  // unit-stride inputs are read 8 elements at a time (four u64; stores stay
  // 4-vectors, which such drivers handle better than 64-bit ones), or with
  // Capabilities::texel_loads as two texels of a uniform texel buffer (fetched
  // without that loop; one view format per kernel, so only when the unit-stride
  // inputs share a dtype).
  const auto is32 = [](DType d) { return d == DType::kF32 || d == DType::kI32 || d == DType::kU32; };
  bool vec4 = generic_size && n % 4 == 0;
  for (DType d : spec.outs) vec4 = vec4 && is32(d);
  for (DType d : spec.inputs) vec4 = vec4 && is32(d);
  const auto& caps = ctx.caps();
  bool texel = vec4 && n > 0 && n % 8 == 0 && caps.texel_loads &&
               static_cast<std::uint64_t>(n / 4) <= caps.max_texel_buffer_elements;
  std::optional<DType> texel_dtype;
  for (std::size_t k = 0; k < spec.inputs.size(); ++k) {
    if (spec.views[k].strides[0] != 1) continue;
    if (!texel_dtype) texel_dtype = spec.inputs[k];
    texel = texel && spec.inputs[k] == *texel_dtype;
  }
  texel = texel && texel_dtype.has_value();
  const bool vec8 = vec4 && n % 8 == 0 && (caps.wide_loads || texel);
  const std::uint32_t W = vec8 ? 8 : vec4 ? 4 : 1;  // elements per item
  std::vector<std::string_view> out_names;
  for (DType d : spec.outs) out_names.push_back(name(d));
  std::string key = detail::str_cat("map|", spec.key, "|", detail::join(out_names, ","),
                                    texel ? "|t8|" : vec8 ? "|v8|" : vec4 ? "|v4|" : "|");
  for (std::size_t k = 0; k < spec.inputs.size(); ++k) {
    key += detail::str_cat(name(spec.inputs[k]), "@",
                           generic_size ? std::string(spec.views[k].strides[0] ? "1" : "0")
                                        : view_key(spec.views[k]),
                           ";");
  }
  if (addressed != 0) key += detail::str_cat("addr=", addressed, ";");
  if (!generic_size) {
    key += detail::str_cat("dom=", detail::join(spec.domain, ","), ";out=",
                           view_key(spec.out_view), spec.collapse ? "" : ";nc");
  }
  // The items (W elements each) an invocation visits, push 0 being their count:
  // a grid-stride loop (push 1 = invocations launched), or with
  // Capabilities::map_chunks one contiguous chunk per workgroup of one subgroup
  // (push 1 = the chunk's length), so each SIMD slice streams through memory.
  const bool chunks = ctx.caps().map_chunks;
  const std::uint32_t local =
      chunks ? std::clamp<std::uint32_t>(ctx.caps().subgroup_size, 1, local_size(ctx))
             : local_size(ctx);
  const auto for_items = [&](Builder& b, const std::function<void(const Val&)>& body) {
    if (!chunks) {
      b.loop(b.global_index(), b.push(0), b.push(1), body);
      return;
    }
    Val first = b.op("OpIMul", Ty::kU32, {b.workgroup(), b.push(1)});
    Val end = b.glsl("UMin", Ty::kU32, {b.op("OpIAdd", Ty::kU32, {first, b.push(1)}), b.push(0)});
    b.loop(b.op("OpIAdd", Ty::kU32, {first, b.invocation()}), end, b.u32(local), body);
  };
  const auto bindings = static_cast<std::uint32_t>(spec.inputs.size() + spec.outs.size());
  const Pipeline& p = ctx.pipelines().get(key, [&] {
    Builder b(local, 2, addressed);
    if (vec4) {
      // Unit-stride inputs as vectors; broadcast scalars as scalars; outputs as
      // 4-vectors (two per item of 8).
      for (std::size_t k = 0; k < spec.inputs.size(); ++k) {
        if (spec.views[k].strides[0] != 1) {
          b.buffer(spec.inputs[k], true);
        } else if (texel) {
          b.texel_buffer4(spec.inputs[k]);
        } else if (vec8) {
          b.buffer8(spec.inputs[k], true);
        } else {
          b.buffer4(spec.inputs[k], true);
        }
      }
      std::vector<int> outs;
      for (DType d : spec.outs) outs.push_back(b.buffer4(d, false));
      for_items(b, [&](const Val& i) {
        std::vector<std::vector<Val>> lanes;
        for (std::size_t k = 0; k < spec.inputs.size(); ++k) {
          const int in = static_cast<int>(k);
          if (spec.views[k].strides[0] != 1) {
            lanes.emplace_back(W, b.load(in, b.u32(0)));
          } else if (texel) {  // texels 2i and 2i + 1
            const Val t0 = b.op("OpShiftLeftLogical", Ty::kU32, {i, b.u32(1)});
            const auto v = b.load4(in, t0);
            const auto w = b.load4(in, b.op("OpIAdd", Ty::kU32, {t0, b.u32(1)}));
            lanes.emplace_back(v.begin(), v.end());
            lanes.back().insert(lanes.back().end(), w.begin(), w.end());
          } else if (vec8) {
            const auto v = b.load8(in, i);
            lanes.emplace_back(v.begin(), v.end());
          } else {
            const auto v = b.load4(in, i);
            lanes.emplace_back(v.begin(), v.end());
          }
        }
        std::vector<std::vector<Val>> results(outs.size(), std::vector<Val>(W));
        for (std::size_t c = 0; c < W; ++c) {
          MapIndex mi{&b, &spec.domain, i, {}, &spec.views, &lanes, c};
          const std::vector<Val> r = spec.multi_body(b, mi);
          for (std::size_t o = 0; o < outs.size(); ++o) results[o][c] = r[o];
        }
        const Val first4 = vec8 ? b.op("OpShiftLeftLogical", Ty::kU32, {i, b.u32(1)}) : i;
        for (std::size_t o = 0; o < outs.size(); ++o) {
          const auto& r = results[o];
          b.store4(outs[o], first4, {r[0], r[1], r[2], r[3]});
          if (vec8) {
            b.store4(outs[o], b.op("OpIAdd", Ty::kU32, {first4, b.u32(1)}), {r[4], r[5], r[6], r[7]});
          }
        }
      });
      return KernelSource{b.finish(), bindings, 2, b.texel_bindings(),
                          texel ? texel_format(*texel_dtype) : VK_FORMAT_UNDEFINED, addressed};
    }
    for (DType d : spec.inputs) b.buffer(d, true);
    std::vector<int> outs;
    for (DType d : spec.outs) outs.push_back(b.buffer(d, false));
    for_items(b, [&](const Val& i) {
      MapIndex mi{&b, &spec.domain, i, {}, &spec.views};
      if (!rank1) {
        mi.dims.resize(spec.domain.size());
        Val rem = i;
        for (std::size_t d = spec.domain.size(); d-- > 0;) {
          Val extent = b.u32(static_cast<std::uint32_t>(spec.domain[d]));
          mi.dims[d] = d == 0 ? rem : b.op("OpUMod", Ty::kU32, {rem, extent});
          if (d > 0) rem = b.op("OpUDiv", Ty::kU32, {rem, extent});
        }
      }
      const std::vector<Val> v = spec.multi_body(b, mi);
      std::vector<View> outv{spec.out_view};
      MapIndex mo = mi;
      mo.views = &outv;
      const Val at = mo.offset(0);
      for (std::size_t o = 0; o < outs.size(); ++o) b.store(outs[o], at, v[o]);
    });
    return KernelSource{b.finish(), bindings, 2, 0, VK_FORMAT_UNDEFINED, addressed};
  });
  Launch l;
  l.pipeline = &p;
  const std::int64_t items = n / W;
  const std::uint64_t needed = (static_cast<std::uint64_t>(items) + local - 1) / local;
  // Enough workgroups that no invocation loops more often than the driver allows.
  std::uint64_t cap = ctx.caps().map_group_cap;
  if (const std::uint64_t limit = ctx.quirks().max_loop_iterations; limit > 0) {
    cap = std::max(cap, (static_cast<std::uint64_t>(items) + local * limit - 1) / (local * limit));
  }
  l.groups = grid_for(ctx, std::min(needed, cap), spec.key.c_str());
  const std::uint64_t launched = std::uint64_t{l.groups[0]} * l.groups[1];
  // A chunk is a whole number of workgroup-wide steps.
  const std::uint64_t per_group = (static_cast<std::uint64_t>(items) + launched - 1) / launched;
  const std::uint64_t chunk = (per_group + local - 1) / local * local;
  l.push = {static_cast<std::uint32_t>(items),
            static_cast<std::uint32_t>(chunks ? chunk : launched * local)};
  return l;
}

}  // namespace kiln::vk
