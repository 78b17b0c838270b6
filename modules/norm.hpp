// Normalisation layers of kiln::nn beyond LayerNorm: BatchNorm (with running
// statistics kept in an nn::State, see state.hpp), GroupNorm and RMSNorm, with
// Equinox's parameters and defaults. Channels are axis 1 of a batched input
// (N, C, ...), as for Conv2d; RMSNorm normalises trailing axes like LayerNorm.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kiln/modules/state.hpp"
#include "kiln/runtime/array.hpp"
#include "kiln/runtime/dtype.hpp"
#include "kiln/runtime/tree.hpp"

namespace kiln::nn {

struct BatchNormOptions {
  double eps = 1e-5;
  // Weight of the old running value (Equinox's convention; PyTorch's momentum
  // m corresponds to 1 - m here): running = momentum * running + (1 - momentum)
  // * batch.
  double momentum = 0.99;
  bool channelwise_affine = true;  // weight (ones) and bias (zeros); else None
  bool inference = false;
  DType dtype = f32;      // of the parameters and the running statistics
  std::string name = {};  // the state index; default "BatchNorm_<n>"
};

// Normalises each channel c of x (N, C, ...) over every axis but 1.
// Training (inference == false): with the batch mean and the biased batch
// variance, gradients flowing through both, and returns the state with the
// running statistics updated by `momentum` (running var from the biased batch
// variance, as Equinox; no first-step special case: the running mean starts at
// zeros and the running var at ones, as PyTorch). Inference: with the running
// statistics, returning the state unchanged. `inference` is static: switching
// it retraces.
struct BatchNorm {
  Array weight;  // (C,), or None
  Array bias;    // (C,), or None
  StateIndex state_index;
  std::int64_t input_size = 0;
  double eps = 1e-5;
  double momentum = 0.99;
  bool inference = false;
  KILN_MODULE(BatchNorm, weight, bias, state_index, input_size, eps, momentum, inference);

  BatchNorm() = default;
  // Adds the running statistics (zeros and ones of shape (C,)) to `state`.
  BatchNorm(std::int64_t input_size, State& state, const BatchNormOptions& options = {});
  std::pair<Array, State> operator()(const Array& x, const State& state) const;
  // Overrides the stored flag for this call.
  std::pair<Array, State> operator()(const Array& x, const State& state, bool inference) const;
};

// eqx.nn.GroupNorm: splits the C channels of x (N, C, ...) into `groups`
// groups and normalises each group (with its spatial axes) per example, then
// scales and shifts per channel.
struct GroupNorm {
  Array weight;  // (C,), or None
  Array bias;    // (C,), or None
  std::int64_t groups = 1;
  std::int64_t channels = 0;
  double eps = 1e-5;
  KILN_MODULE(GroupNorm, weight, bias, groups, channels, eps);

  GroupNorm() = default;
  GroupNorm(std::int64_t groups, std::int64_t channels, double eps = 1e-5,
            bool channelwise_affine = true);
  Array operator()(const Array& x) const;
};

// eqx.nn.RMSNorm over the trailing `shape` axes:
// x / sqrt(mean(x^2) + eps) * weight + bias (weight ones, bias zeros).
struct RMSNorm {
  Array weight;  // `shape`, or None
  Array bias;    // `shape`, or None
  std::vector<std::int64_t> shape;
  double eps = 1e-5;
  KILN_MODULE(RMSNorm, weight, bias, shape, eps);

  RMSNorm() = default;
  explicit RMSNorm(std::vector<std::int64_t> shape, double eps = 1e-5, bool use_weight = true,
                   bool use_bias = true);
  Array operator()(const Array& x) const;
};

}  // namespace kiln::nn
