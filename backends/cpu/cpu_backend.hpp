// The CPU backend: xtensor expressions (SIMD through xsimd) and BLAS through
// xtensor-blas/OpenBLAS. It is the reference the other backends are tested against.
// Each primitive family lives in its own file and exposes one eval function here.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "kiln/dsl/backend.hpp"

namespace kiln::cpu {

class CpuBackend final : public Backend {
 public:
  Device device() const override { return Device::cpu(); }
  std::shared_ptr<Buffer> eval(Prim p, const Params& params,
                               std::span<const Array> inputs,
                               const Aval& out) override;
  // One chunked pass per fused elementwise group (fused.cpp).
  std::vector<std::shared_ptr<Buffer>> eval_fused(
      const FusedKernel& kernel, std::span<const Array> inputs,
      std::span<const std::shared_ptr<Buffer>> into) override;
  // Convolutions' implicit-GEMM kernels (implicit_gemm.cpp).
  bool fuses_windows() const override { return true; }
  Array from_host(const Array& host) override { return host; }

 private:
  std::vector<std::shared_ptr<Buffer>> eval_epilogue(
      const FusedKernel& kernel, std::span<const Array> inputs,
      std::span<const std::shared_ptr<Buffer>> into);
  std::vector<std::shared_ptr<Buffer>> eval_prologue(
      const FusedKernel& kernel, std::span<const Array> inputs,
      std::span<const std::shared_ptr<Buffer>> into);
  std::vector<std::shared_ptr<Buffer>> eval_implicit_gemm(const FusedKernel& kernel,
                                                          std::span<const Array> inputs);
};

using EvalFn = std::shared_ptr<Buffer>(Prim, const Params&,
                                       std::span<const Array>, const Aval&);
EvalFn eval_unary;       // elementwise.cpp
EvalFn eval_binary;      // elementwise.cpp
EvalFn eval_where;       // elementwise.cpp
EvalFn eval_astype;      // elementwise.cpp
EvalFn eval_reduce;      // reduce.cpp
EvalFn eval_arg_reduce;  // reduce.cpp
EvalFn eval_scan;        // scan.cpp
EvalFn eval_sort;        // sort.cpp
EvalFn eval_matmul;      // matmul.cpp
EvalFn eval_layout;      // layout.cpp
EvalFn eval_index;       // index.cpp
EvalFn eval_window;      // window.cpp
EvalFn eval_creation;    // creation.cpp

// Allocates the output buffer for `out` (uninitialised).
std::shared_ptr<HostBuffer> allocate(const Aval& out);

}  // namespace kiln::cpu
