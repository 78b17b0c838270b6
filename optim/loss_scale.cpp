// DynamicLossScale and all_finite, written in DSL ops (jmp's arithmetic).
#include "kiln/optim/loss_scale.hpp"

#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::optim {

Array detail::all_finite_leaves(std::span<const Array> leaves, Device device) {
  Array finite;
  for (const Array& leaf : leaves) {
    if (leaf.is_null() || !is_inexact(leaf.dtype())) continue;
    const Array here = all(isfinite(leaf));
    finite = finite.is_null() ? here : logical_and(finite, here);
  }
  return finite.is_null() ? full(Shape{}, 1, DType::kBool, device) : finite;
}

DynamicLossScale::DynamicLossScale(double initial_scale, std::int64_t period,
                                   double factor, double min_loss_scale,
                                   Device device)
    : period(period), factor(factor), min_loss_scale(min_loss_scale) {
  if (!(initial_scale > 0) || !(min_loss_scale > 0) || period < 1 ||
      !(factor > 1)) {
    throw ValueError(kiln::detail::str_cat(
        "[optim.DynamicLossScale] needs initial_scale > 0, period >= 1, "
        "factor > 1 and min_loss_scale > 0; got initial_scale ",
        initial_scale, ", period ", period, ", factor ", factor,
        ", min_loss_scale ", min_loss_scale));
  }
  loss_scale = full(Shape{}, initial_scale, f32, device);
  counter = full(Shape{}, 0, i32, device);
}

Array DynamicLossScale::scale(const Array& x) const {
  return x * astype(loss_scale, x.dtype());
}

Array DynamicLossScale::unscale(const Array& x) const {
  return x * astype(1.0 / loss_scale, x.dtype());
}

DynamicLossScale DynamicLossScale::adjust(const Array& grads_finite) const {
  const Array grown = loss_scale * factor;
  const Array at_period = counter == static_cast<double>(period - 1);
  const Array up =
      where(logical_and(at_period, isfinite(grown)), grown, loss_scale);
  const Array down =
      maximum(loss_scale / factor, full_like(loss_scale, min_loss_scale));
  DynamicLossScale next = *this;
  next.loss_scale = where(grads_finite, up, down);
  next.counter =
      where(grads_finite,
            mod(counter + 1, full_like(counter, static_cast<double>(period))),
            zeros_like(counter));
  return next;
}

}  // namespace kiln::optim
