// CPU kernels of a convolution's implicit-GEMM halves (dsl/fusion.hpp):
// - kUnfoldMatmul: for each product of the matmul, the columns it reads are
//   unfolded into a buffer of the task's (one image's: 225 KiB for the CNN's
//   second layer, so they stay in L2) and multiplied from there, instead of
//   being written out for the whole batch and read back;
// - kMatmulFold: each product goes into a buffer of the task's and is folded
//   from there into its images.
// Both run the unfused program's products (matmul.hpp: the same geometry,
// the same GEMM calls, the same split over the pool) on the same columns, and
// fold adds in the same order, so the results have the unfused bits. f32 and
// f64 only: other dtypes, and the cases the per-product split does not cover
// (columns broadcast over the batch, an empty contraction), run the body one
// equation at a time (Backend::eval_fused).
#include <algorithm>
#include <memory>
#include <vector>

#include "kiln/backends/cpu/cpu_backend.hpp"
#include "kiln/backends/cpu/gemm.hpp"
#include "kiln/backends/cpu/matmul.hpp"
#include "kiln/backends/cpu/window.hpp"
#include "kiln/dsl/fusion.hpp"

namespace kiln::cpu {
namespace {

// Where the kernel's cache keeps its Plan (fused.cpp and fused_anchored.cpp
// use bits 61 to 63 for the other kinds).
constexpr std::uint64_t kWindowKey = std::uint64_t{1} << 60;

// What a kernel resolves to on its first run.
struct Plan {
  bool direct = false;  // else Backend::eval_fused
  const Equation* window = nullptr;  // the unfold or fold
  const Equation* matmul = nullptr;
  WindowPlan geometry;
  MatmulGeometry products;
  int cols_side = 0;           // kUnfoldMatmul: the matmul operand that is the columns
  std::int64_t per_product = 0;  // units (unfold) or images (fold) of one product
};

std::size_t input_index(const Program& b, ValueId v) {
  return static_cast<std::size_t>(std::find(b.inputs.begin(), b.inputs.end(), v) -
                                  b.inputs.begin());
}

Plan make_plan(const FusedKernel& k) {
  const Program& b = k.body;
  Plan plan;
  const bool unfold_first = k.kind == FusedKernel::Kind::kUnfoldMatmul;
  plan.window = unfold_first ? &b.equations.front() : &b.equations.back();
  plan.matmul = unfold_first ? &b.equations.back() : &b.equations.front();
  const Aval& product = b.avals[plan.matmul->output];
  const auto& mp = plan.matmul->params.as<MatmulParams>();
  const Shape& as = b.avals[plan.matmul->inputs[0]].shape;
  const Shape& bs = b.avals[plan.matmul->inputs[1]].shape;
  plan.products = matmul_geometry(as, bs, product.shape, mp.transpose_a, mp.transpose_b);
  plan.geometry = window_plan(plan.window->params.as<WindowParams>());
  const MatmulGeometry& g = plan.products;
  const bool exact_split = product.dtype == DType::kF32 && gemm_lib() == GemmLib::kKiln;
  if ((product.dtype != DType::kF32 && product.dtype != DType::kF64) || g.k == 0 ||
      numel(product.shape) == 0 || (g.fold_batch && !exact_split)) {
    return plan;
  }
  if (unfold_first) {
    // The columns' side: its batch must not be broadcast, and each of its
    // matrices must be whole rows of the unfold's output.
    const ValueId cols = b.equations[b.equations.size() - 2].output;
    plan.cols_side = plan.matmul->inputs[0] == cols ? 0 : 1;
    const Shape& cs = plan.cols_side == 0 ? as : bs;
    const std::int64_t matrix = cs[cs.size() - 2] * cs[cs.size() - 1];
    const std::int64_t units = plan.geometry.positions;
    if (numel(cs) != g.batch * matrix || matrix % units != 0) return plan;
    plan.per_product = matrix / units;
  } else {
    const std::int64_t block = plan.geometry.taps * plan.geometry.positions;
    const std::int64_t matrix = g.m * g.n;
    if (plan.geometry.image == 0 || block == 0 || matrix % block != 0) return plan;
    plan.per_product = matrix / block;
  }
  plan.direct = true;
  return plan;
}

template <class T>
void unfold_matmul(const Plan& plan, DType dtype, const T* image, const T* other, T* c) {
  const MatmulGeometry& g = plan.products;
  const WindowPlan& geo = plan.geometry;
  const T pad = static_cast<T>(plan.window->params.as<WindowParams>().pad_value);
  const std::int64_t per = plan.per_product;
  for_each_product(g, dtype, [&](std::int64_t begin, std::int64_t end) {
    const auto cols =
        std::make_unique_for_overwrite<T[]>(static_cast<std::size_t>(per * geo.positions));
    for (std::int64_t i = begin; i < end; ++i) {
      const auto [off_a, off_b] = g.offsets(i);
      const std::int64_t at = (plan.cols_side == 0 ? off_a : off_b) * per;
      unfold_units(geo, image, at, at + per, pad, cols.get());
      const T* a = plan.cols_side == 0 ? cols.get() : other + off_a * g.m * g.k;
      const T* b = plan.cols_side == 1 ? cols.get() : other + off_b * g.k * g.n;
      gemm<T>(g.m, g.n, g.k, a, b, c + i * g.m * g.n, g.ta, g.tb);
    }
  });
}

template <class T>
void matmul_fold(const Plan& plan, DType dtype, const T* a, const T* b, T* image) {
  const MatmulGeometry& g = plan.products;
  const std::int64_t per = plan.per_product;
  for_each_product(g, dtype, [&](std::int64_t begin, std::int64_t end) {
    const auto product =
        std::make_unique_for_overwrite<T[]>(static_cast<std::size_t>(g.m * g.n));
    for (std::int64_t i = begin; i < end; ++i) {
      const auto [off_a, off_b] = g.offsets(i);
      gemm<T>(g.m, g.n, g.k, a + off_a * g.m * g.k, b + off_b * g.k * g.n, product.get(), g.ta,
              g.tb);
      fold_images(plan.geometry, product.get(), i * per, (i + 1) * per, image);
    }
  });
}

template <class T>
void run_direct(const FusedKernel& k, const Plan& plan, std::span<const Array> inputs,
                T* out) {
  const Program& b = k.body;
  const auto operand = [&](ValueId v) { return inputs[input_index(b, v)].data<T>(); };
  const DType dtype = b.avals[plan.matmul->output].dtype;
  if (k.kind == FusedKernel::Kind::kUnfoldMatmul) {
    const ValueId other = plan.matmul->inputs[1 - plan.cols_side];
    unfold_matmul(plan, dtype, operand(plan.window->inputs[0]), operand(other), out);
  } else {
    matmul_fold(plan, dtype, operand(plan.matmul->inputs[0]), operand(plan.matmul->inputs[1]),
                out);
  }
}

}  // namespace

std::vector<std::shared_ptr<Buffer>> CpuBackend::eval_implicit_gemm(
    const FusedKernel& k, std::span<const Array> inputs) {
  const std::shared_ptr<const Plan> plan = k.cache.get<Plan>(
      kWindowKey, [&] { return std::make_shared<const Plan>(make_plan(k)); });
  if (!plan->direct) return Backend::eval_fused(k, inputs, {});
  const Aval& out = k.body.avals[k.body.outputs.front()];
  auto buf = allocate(out);
  if (out.dtype == DType::kF32) {
    run_direct(k, *plan, inputs, static_cast<float*>(buf->host_data()));
  } else {
    run_direct(k, *plan, inputs, static_cast<double*>(buf->host_data()));
  }
  return {buf};
}

}  // namespace kiln::cpu
