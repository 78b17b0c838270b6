// Dynamic loss scaling for f16 training (jmp.DynamicLossScale): the loss is
// multiplied by a large scale before the backward pass so that small f16
// gradients do not flush to zero, the gradients are divided by it after, and
// the scale adapts: halved when the gradients overflow, doubled after
// `period` finite steps in a row. The scale and the counter are dynamic 0-d
// arrays and every decision is a `where`, so a jitted step that scales,
// unscales and adjusts is one program whatever happens to the gradients.
// Use with apply_if_finite, which skips the step whose gradients overflowed.
#pragma once

#include <cstdint>
#include <span>

#include "kiln/dsl/ops.hpp"
#include "kiln/runtime/tree.hpp"

namespace kiln::optim {

namespace detail {
// bool 0-d: every element of every floating array in `leaves` is finite
// (true when there are none; integer and bool arrays are always finite).
Array all_finite_leaves(std::span<const Array> leaves, Device device);
}  // namespace detail

// jmp.all_finite: a bool 0-d array, true when no floating array leaf of
// `tree` holds an inf or a NaN. No host read.
template <class T>
Array all_finite(const T& tree, Device device = default_device()) {
  const std::vector<Array> leaves = tree::leaves(tree);
  return detail::all_finite_leaves(leaves, device);
}

struct DynamicLossScale {
  Array loss_scale;  // f32 0-d
  Array counter;     // i32 0-d: finite steps since the scale last changed
  std::int64_t period = 2000;
  double factor = 2.0;
  double min_loss_scale = 1.0;
  KILN_MODULE(DynamicLossScale, loss_scale, counter, period, factor,
              min_loss_scale);

  DynamicLossScale() = default;
  // jmp's defaults (period 2000, factor 2, min_loss_scale 1). ValueError for
  // a scale or min_loss_scale that is not positive, a period < 1 or a factor
  // <= 1.
  explicit DynamicLossScale(double initial_scale, std::int64_t period = 2000,
                            double factor = 2.0, double min_loss_scale = 1.0,
                            Device device = default_device());

  // x * loss_scale, in x's dtype.
  Array scale(const Array& x) const;
  // x * (1 / loss_scale), in x's dtype.
  Array unscale(const Array& x) const;
  // unscale at every floating array of `grads` (None stays None).
  template <class T>
  T unscale(const T& grads) const {
    return tree::map(
        [&](const Array& g) { return is_inexact(g.dtype()) ? unscale(g) : g; },
        grads);
  }
  // The next state (jmp.DynamicLossScale.adjust): on finite gradients the
  // counter advances and every `period`-th step the scale is multiplied by
  // `factor` (unless that overflows f32); on non-finite gradients the scale
  // is divided by `factor`, floored at min_loss_scale, and the counter
  // restarts. grads_finite is a bool 0-d array (all_finite(grads)).
  DynamicLossScale adjust(const Array& grads_finite) const;
};

}  // namespace kiln::optim
