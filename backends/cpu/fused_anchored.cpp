// CPU kernels of fused groups with an anchor (dsl/fusion.hpp): a matmul
// epilogue runs BLAS then the elementwise group over the product; a reduction
// prologue runs the group (the reduced value into a temporary) then the
// reduction kernel, so both give the unfused bits. The group is the kernel's
// elementwise part, split off once per kernel and kept in its KernelCache; the
// anchor goes through CpuBackend::eval, so 16-bit floats round as unfused (the
// group's through computed_in_f32).
#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "kiln/backends/cpu/cpu_backend.hpp"
#include "kiln/dsl/fusion.hpp"

namespace kiln::cpu {
namespace {

// The KernelCache key of the split (fused.cpp's plans use bit 63).
constexpr std::uint64_t kSplitKey = std::uint64_t{1} << 62;

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

// part_of, made on the kernel's first run and kept with it (its own plans are
// then kept with the part). `outputs` depend only on `k`.
struct Part {
  FusedKernel kernel;
  std::vector<ValueId> reads;
};
const Part& cached_part(const FusedKernel& k, std::size_t first, std::size_t last,
                        const std::vector<ValueId>& outputs) {
  return *k.cache.get<Part>(kSplitKey, [&] {
    auto part = std::make_shared<Part>();
    part->kernel = part_of(k, first, last, outputs, part->reads);
    return std::shared_ptr<const Part>(std::move(part));
  });
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
  // eval: a 16-bit product is computed in f32 and rounded, as unfused.
  const Array product(pa.dtype, pa.shape, eval(mm.prim, mm.params, operands, pa));
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
  const Part& split = cached_part(k, 1, b.equations.size(), rest);
  const FusedKernel& part = split.kernel;
  const std::vector<ValueId>& reads = split.reads;
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
  const Part& split = cached_part(k, 0, b.equations.size() - 1, rest);
  const FusedKernel& part = split.kernel;
  const std::vector<ValueId>& reads = split.reads;
  std::vector<Array> args;
  for (ValueId v : reads) {
    args.push_back(inputs[static_cast<std::size_t>(
        std::find(b.inputs.begin(), b.inputs.end(), v) - b.inputs.begin())]);
  }
  std::vector<std::shared_ptr<Buffer>> outs = eval_fused(part, args, rest_into);
  const Aval& ra = b.avals[reduced];
  const Array values[] = {Array(ra.dtype, ra.shape, outs[at])};
  std::shared_ptr<Buffer> result = eval(red.prim, red.params, values, b.avals[red.output]);
  outs.resize(b.outputs.size() - 1);  // drops the temporary (when it is one)
  outs.push_back(std::move(result));
  return outs;
}

}  // namespace kiln::cpu
