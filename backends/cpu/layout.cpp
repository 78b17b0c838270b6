// CPU kernels for layout primitives: reshape, transpose, broadcast_to, concatenate,
// slice. They move elements without looking at them, so each is written once over
// the element size (bits.hpp). Arrays are immutable, so a result with the same
// elements in the same order (reshape, identity transpose or slice) shares the
// input's buffer instead of copying it.
#include <algorithm>
#include <cstring>

#include <xtensor/xbroadcast.hpp>
#include <xtensor/xmanipulation.hpp>
#include <xtensor/xstrided_view.hpp>
#include <xtensor/xview.hpp>

#include "kiln/backends/cpu/bits.hpp"
#include "kiln/backends/cpu/cpu_backend.hpp"

namespace kiln::cpu {
namespace {

bool is_identity(const Axes& perm) {
  for (std::size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] != static_cast<std::int64_t>(i)) return false;
  }
  return true;
}

std::shared_ptr<Buffer> transpose(const Params& params, const Array& in,
                                  const Aval& out) {
  if (is_identity(params.axes)) return in.buffer();
  auto buf = allocate(out);
  if (numel(out.shape) == 0) return buf;
  visit_element_size(out.dtype, [&](auto zero) {
    using U = decltype(zero);
    auto dst = adapt_output<U>(buf->host_data(), out.shape);
    dst = xt::transpose(adapt_input<U>(in),
                        std::vector<std::size_t>(params.axes.begin(),
                                                 params.axes.end()));
  });
  return buf;
}

std::shared_ptr<Buffer> broadcast_to(const Array& in, const Aval& out) {
  if (in.shape() == out.shape) return in.buffer();
  auto buf = allocate(out);
  if (numel(out.shape) == 0) return buf;
  visit_element_size(out.dtype, [&](auto zero) {
    using U = decltype(zero);
    auto dst = adapt_output<U>(buf->host_data(), out.shape);
    dst = xt::broadcast(adapt_input<U>(in), xshape(out.shape));
  });
  return buf;
}

// Every input, and the output, is viewed as (outer, axis extent * inner): each
// input then fills a column band of the output, one contiguous run per row.
std::shared_ptr<Buffer> concatenate(const Params& params,
                                    std::span<const Array> inputs,
                                    const Aval& out) {
  auto buf = allocate(out);
  if (numel(out.shape) == 0) return buf;
  const auto axis = static_cast<std::size_t>(params.axis);
  std::size_t outer = 1;
  for (std::size_t d = 0; d < axis; ++d) outer *= out.shape[d];
  const std::size_t row = static_cast<std::size_t>(numel(out.shape)) / outer;
  visit_element_size(out.dtype, [&](auto zero) {
    using U = decltype(zero);
    auto dst = xt::adapt(static_cast<U*>(buf->host_data()), outer * row,
                         xt::no_ownership(),
                         std::vector<std::size_t>{outer, row});
    std::size_t offset = 0;
    for (const Array& in : inputs) {
      const std::size_t width = static_cast<std::size_t>(in.size()) / outer;
      if (width == 0) continue;
      auto src = xt::adapt(host_elements<U>(in), outer * width,
                           xt::no_ownership(),
                           std::vector<std::size_t>{outer, width});
      xt::view(dst, xt::all(), xt::range(offset, offset + width)) = src;
      offset += width;
    }
  });
  return buf;
}

std::shared_ptr<Buffer> slice(const Params& params, const Array& in,
                              const Aval& out) {
  const Shape& shape = in.shape();
  bool whole = true;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    whole = whole && params.starts[d] == 0 && out.shape[d] == shape[d];
  }
  if (whole) return in.buffer();
  auto buf = allocate(out);
  if (numel(out.shape) == 0) return buf;
  xt::xstrided_slice_vector ranges;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    // The stop is the last taken index + 1, so it never passes the extent.
    const std::int64_t start = params.starts[d];
    const std::int64_t stop = start + (out.shape[d] - 1) * params.steps[d] + 1;
    ranges.push_back(xt::range(start, stop, params.steps[d]));
  }
  visit_element_size(out.dtype, [&](auto zero) {
    using U = decltype(zero);
    auto dst = adapt_output<U>(buf->host_data(), out.shape);
    dst = xt::strided_view(adapt_input<U>(in), ranges);
  });
  return buf;
}

}  // namespace

std::shared_ptr<Buffer> eval_layout(Prim p, const Params& params,
                                    std::span<const Array> inputs,
                                    const Aval& out) {
  switch (p) {
    case Prim::kReshape:
      return inputs[0].buffer();  // same elements, same order
    case Prim::kTranspose:
      return transpose(params, inputs[0], out);
    case Prim::kBroadcastTo:
      return broadcast_to(inputs[0], out);
    case Prim::kConcatenate:
      return concatenate(params, inputs, out);
    case Prim::kSlice:
      return slice(params, inputs[0], out);
    default:
      break;
  }
  throw Error(detail::str_cat("[cpu] ", name(p), " is not a layout primitive"));
}

}  // namespace kiln::cpu
