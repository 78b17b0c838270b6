// CPU kernels of a convolution's implicit-GEMM halves (dsl/fusion.hpp):
// - kUnfoldMatmul: for each product of the matmul, the columns it reads are
//   unfolded into a buffer of the task's (one image's: 225 KiB for the CNN's
//   second layer, so they stay in L2) and multiplied from there, instead of
//   being written out for the whole batch and read back;
// - kMatmulFold: each product goes into a buffer of the task's and is folded
//   from there into its images.
// Both run the unfused program's products (matmul.hpp: the same geometry,
// the same GEMM calls, the same split over the pool) on the same columns, and
// fold adds in the same order, so the results have the unfused bits. f16 and
// bf16 compute in f32 and round where the unfused program stores them. The
// cases the per-product split does not cover (columns broadcast over the
// batch, an empty contraction) run the body one equation at a time
// (Backend::eval_fused).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "kiln/backends/cpu/cpu_backend.hpp"
#include "kiln/backends/cpu/gemm.hpp"
#include "kiln/backends/cpu/half.hpp"
#include "kiln/backends/cpu/matmul.hpp"
#include "kiln/backends/cpu/window.hpp"
#include "kiln/dsl/fusion.hpp"
#include "kiln/runtime/half.hpp"

namespace kiln::cpu {
namespace {

// Where the kernel's cache keeps its GemmPlan (fused.cpp and
// fused_anchored.cpp use bits 61 to 63 for the other kinds; its Plan and this
// one are distinct names for the unity builds).
constexpr std::uint64_t kWindowKey = std::uint64_t{1} << 60;

// What a kernel resolves to on its first run.
struct GemmPlan {
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

GemmPlan make_plan(const FusedKernel& k) {
  const Program& b = k.body;
  GemmPlan plan;
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
  // 16-bit floats compute in f32 (eval_in_f32), so their products are f32's.
  const bool exact_split = product.dtype != DType::kF64 && gemm_lib() == GemmLib::kKiln;
  bool one_dtype = true;
  for (const Equation& eq : b.equations) {
    for (ValueId v : eq.inputs) one_dtype = one_dtype && b.avals[v].dtype == product.dtype;
  }
  if (!one_dtype || !is_inexact(product.dtype) || g.k == 0 ||
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
    const std::int64_t units = plan.geometry.positions;  // >= 1: unfold rejects none
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

// Elements stored as `dtype`: f32 and f64 computed as themselves; f16 and bf16
// (16-bit words) computed in f32, widened where read and rounded where the
// unfused program stores a 16-bit value, as eval_in_f32 does (half.hpp).
struct Storage {
  DType dtype;
  FlatKernel widen = nullptr;   // words -> f32 (16-bit only)
  FlatKernel narrow = nullptr;  // f32 -> words
  bool half() const { return widen != nullptr; }
};

void convert(FlatKernel k, const void* in, void* out, std::int64_t n) {
  const FlatOperand operand{in, false};
  k(&operand, out, static_cast<std::size_t>(n));
}

template <class T>
std::unique_ptr<T[]> buffer(std::int64_t n) {
  return std::make_unique_for_overwrite<T[]>(static_cast<std::size_t>(n));
}

// The pad value of `dtype` (16-bit: as its word).
template <class T>
T pad_of(const GemmPlan& plan) {
  const double v = plan.window->params.as<WindowParams>().pad_value;
  return static_cast<T>(v);
}
std::uint16_t pad_word(const GemmPlan& plan, DType dtype) {
  const auto v = static_cast<float>(plan.window->params.as<WindowParams>().pad_value);
  return dtype == DType::kF16 ? float_to_half(v) : float_to_bf16(v);
}

// T: the compute type. `image` and `c` are stored as st.dtype, `other` is in T.
template <class T>
void unfold_matmul(const GemmPlan& plan, const Storage& st, const void* image, const T* other,
                   void* c) {
  const MatmulGeometry& g = plan.products;
  const WindowPlan& geo = plan.geometry;
  const std::int64_t per = plan.per_product, cols_n = per * geo.positions, prod_n = g.m * g.n;
  for_each_product(g, std::is_same_v<T, float> ? DType::kF32 : DType::kF64,
                   [&](std::int64_t begin, std::int64_t end) {
    const auto cols = buffer<T>(cols_n);
    std::unique_ptr<std::uint16_t[]> words;
    std::unique_ptr<T[]> product;
    if (st.half()) {
      words = buffer<std::uint16_t>(cols_n);
      product = buffer<T>(prod_n);
    }
    for (std::int64_t i = begin; i < end; ++i) {
      const auto [off_a, off_b] = g.offsets(i);
      const std::int64_t at = (plan.cols_side == 0 ? off_a : off_b) * per;
      if (st.half()) {
        unfold_units(geo, static_cast<const std::uint16_t*>(image), at, at + per,
                     pad_word(plan, st.dtype), words.get());
        convert(st.widen, words.get(), cols.get(), cols_n);
      } else {
        unfold_units(geo, static_cast<const T*>(image), at, at + per, pad_of<T>(plan), cols.get());
      }
      const T* a = plan.cols_side == 0 ? cols.get() : other + off_a * g.m * g.k;
      const T* b = plan.cols_side == 1 ? cols.get() : other + off_b * g.k * g.n;
      T* ci = st.half() ? product.get() : static_cast<T*>(c) + i * prod_n;
      gemm<T>(g.m, g.n, g.k, a, b, ci, g.ta, g.tb);
      if (st.half()) convert(st.narrow, ci, static_cast<std::uint16_t*>(c) + i * prod_n, prod_n);
    }
  });
}

// `a` and `b` are in T, `image` stored as st.dtype.
template <class T>
void matmul_fold(const GemmPlan& plan, const Storage& st, const T* a, const T* b, void* image) {
  const MatmulGeometry& g = plan.products;
  const WindowPlan& geo = plan.geometry;
  const std::int64_t per = plan.per_product, prod_n = g.m * g.n, image_n = per * geo.image;
  for_each_product(g, std::is_same_v<T, float> ? DType::kF32 : DType::kF64,
                   [&](std::int64_t begin, std::int64_t end) {
    const auto product = buffer<T>(prod_n);
    std::unique_ptr<std::uint16_t[]> words;
    std::unique_ptr<T[]> images;
    if (st.half()) {
      words = buffer<std::uint16_t>(prod_n);
      images = buffer<T>(image_n);
    }
    for (std::int64_t i = begin; i < end; ++i) {
      const auto [off_a, off_b] = g.offsets(i);
      gemm<T>(g.m, g.n, g.k, a + off_a * g.m * g.k, b + off_b * g.k * g.n, product.get(), g.ta,
              g.tb);
      if (!st.half()) {
        fold_images(geo, product.get(), i * per, (i + 1) * per, static_cast<T*>(image));
        continue;
      }
      // The unfused product is stored rounded; its fold sums in f32.
      convert(st.narrow, product.get(), words.get(), prod_n);
      convert(st.widen, words.get(), product.get(), prod_n);
      fold_images(geo, product.get(), 0, per, images.get());
      convert(st.narrow, images.get(), static_cast<std::uint16_t*>(image) + i * image_n, image_n);
    }
  });
}

// T: the compute type (float for 16-bit storage).
template <class T>
void run_direct(const FusedKernel& k, const GemmPlan& plan, const Storage& st,
                std::span<const Array> inputs, void* out) {
  const Program& b = k.body;
  std::vector<std::vector<T>> wide;  // 16-bit operands widened whole, as eval_in_f32
  wide.reserve(2);
  const auto operand = [&](ValueId v) -> const T* {
    const Array& a = inputs[input_index(b, v)];
    if (!st.half()) return a.data<T>();
    std::vector<T>& w = wide.emplace_back(static_cast<std::size_t>(a.size()));
    convert(st.widen, a.buffer()->host_data(), w.data(), a.size());
    return w.data();
  };
  if (k.kind == FusedKernel::Kind::kUnfoldMatmul) {
    const ValueId other = plan.matmul->inputs[1 - plan.cols_side];
    const void* image = inputs[input_index(b, plan.window->inputs[0])].buffer()->host_data();
    unfold_matmul(plan, st, image, operand(other), out);
  } else {
    const T* pa = operand(plan.matmul->inputs[0]);
    const T* pb = operand(plan.matmul->inputs[1]);
    matmul_fold(plan, st, pa, pb, out);
  }
}

}  // namespace

std::vector<std::shared_ptr<Buffer>> CpuBackend::eval_implicit_gemm(
    const FusedKernel& k, std::span<const Array> inputs) {
  const std::shared_ptr<const GemmPlan> plan = k.cache.get<GemmPlan>(
      kWindowKey, [&] { return std::make_shared<const GemmPlan>(make_plan(k)); });
  if (!plan->direct) return Backend::eval_fused(k, inputs, {});
  const Aval& out = k.body.avals[k.body.outputs.front()];
  auto buf = allocate(out);
  const Storage st{out.dtype, half_astype_kernel(out.dtype, DType::kF32),
                   half_astype_kernel(DType::kF32, out.dtype)};
  if (out.dtype == DType::kF64) {
    run_direct<double>(k, *plan, st, inputs, buf->host_data());
  } else {
    run_direct<float>(k, *plan, st, inputs, buf->host_data());
  }
  return {buf};
}

}  // namespace kiln::cpu
