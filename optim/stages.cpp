// The arithmetic of the stages added for issue 18 (lion, adagrad, clip, lamb's
// trust ratio, adafactor's pieces, ema), each written with DSL ops in the
// order Optax writes it so values agree to f32 rounding. update.cpp runs the
// loop over stages and calls these.
#include <algorithm>
#include <numeric>

#include "kiln/optim/stage_math.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::optim::detail {
namespace {

using kiln::detail::str_cat;

std::vector<Array> zeros_where_active(const InitIO& io, double value = 0) {
  std::vector<Array> out(io.live.size());
  for (std::size_t i = 0; i < io.live.size(); ++i) {
    if (io.active[i])
      out[i] =
          value == 0 ? zeros_like(io.live[i]) : full_like(io.live[i], value);
  }
  return out;
}

// numerics.safe_norm / safe_root_mean_squares: the value is max-like (the
// masking there only protects the gradient at 0).
Array floor_at(const Array& x, double min) {
  return where(x <= min, full_like(x, min), x);
}
Array rms(const Array& x) { return sqrt(mean(x * x)); }

// Adafactor's factored dimensions (d1, d0): the second-largest and the
// largest axis, or none when the leaf is < 2-D or the second-largest is
// smaller than min_dim_size_to_factor (optax _factored_dims; numpy's argsort
// of so few elements is stable).
std::optional<std::pair<std::int64_t, std::int64_t>> factored_dims(
    const Shape& shape, const ScaleByFactoredRms& op) {
  if (!op.factored || shape.size() < 2) return std::nullopt;
  std::vector<std::int64_t> order(shape.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) {
    return shape[static_cast<std::size_t>(a)] <
           shape[static_cast<std::size_t>(b)];
  });
  const std::int64_t d1 = order[order.size() - 2], d0 = order.back();
  if (shape[static_cast<std::size_t>(d1)] < op.min_dim_size_to_factor)
    return std::nullopt;
  return std::pair{d1, d0};
}

Shape without_axis(const Shape& shape, std::int64_t axis) {
  Shape out;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (static_cast<std::int64_t>(i) != axis) out.push_back(shape[i]);
  }
  return out;
}

}  // namespace

// ---- lion ----
void init_stage(const ScaleByLion&, InitIO& io) {
  io.st.leaves["mu"] = zeros_where_active(io);
  io.st.scalars["count"] = scalar_on(0, i32, io.device);
}
void update_stage(const ScaleByLion& op, StageIO& io) {
  std::vector<Array>& mu = state_leaves(io.st, io.c, "mu");
  const Hp b1 = io.hp("b1", op.b1), b2 = io.hp("b2", op.b2);
  for (std::size_t i : io.active) {
    const Array g = io.g[i];  // a copy: io.g[i] is replaced below
    const Array& m = state_entry(mu, io.c, "mu", i, g);
    io.g[i] = sign(g * one_minus(b1) + m * b1);
    mu[i] = g * one_minus(b2) + m * b2;
  }
  io.st.scalars["count"] = safe_increment(state_scalar(io.st, io.c, "count"));
}

// ---- adagrad ----
void init_stage(const ScaleByRss& op, InitIO& io) {
  io.st.leaves["sum_of_squares"] =
      zeros_where_active(io, op.initial_accumulator_value);
}
void update_stage(const ScaleByRss& op, StageIO& io) {
  std::vector<Array>& acc = state_leaves(io.st, io.c, "sum_of_squares");
  const Hp eps = io.hp("eps", op.eps);
  for (std::size_t i : io.active) {
    const Array& g = io.g[i];
    const Array s = g * g + state_entry(acc, io.c, "sum_of_squares", i, g);
    const Array inv = where(s > 0.0, rsqrt(s + eps), zeros_like(s));
    io.g[i] = inv * g;
    acc[i] = s;
  }
}

// ---- clip ----
void init_stage(const Clip&, InitIO&) {}
void update_stage(const Clip& op, StageIO& io) {
  const Hp d = io.hp("max_delta", op.max_delta);
  for (std::size_t i : io.active) {
    const Array& g = io.g[i];
    if (d.dynamic.is_null()) {
      io.g[i] = clip(g, -op.max_delta, op.max_delta);
    } else {
      const Array hi = astype(d.dynamic, g.dtype());
      io.g[i] = clip(g, -hi, hi);
    }
  }
}

// ---- lamb's trust ratio ----
void init_stage(const ScaleByTrustRatio&, InitIO&) {}
void update_stage(const ScaleByTrustRatio& op, StageIO& io) {
  if (io.active.empty()) return;
  io.require_params();
  const Hp tc = io.hp("trust_coefficient", op.trust_coefficient);
  const Hp eps = io.hp("eps", op.eps);
  for (std::size_t i : io.active) {
    const Array& u = io.g[i];
    const Array& p = io.params[i];
    const Array pn = floor_at(norm(p), op.min_norm);
    const Array un = floor_at(norm(u), op.min_norm);
    const Array ratio = (pn * tc) / (un + eps);
    const Array zero = logical_or(pn == 0.0, un == 0.0);
    io.g[i] = u * where(zero, ones_like(ratio), ratio);
  }
}

// ---- adafactor ----
void init_stage(const ScaleByFactoredRms& op, InitIO& io) {
  std::vector<Array> v_row(io.live.size()), v_col(io.live.size()),
      v(io.live.size());
  for (std::size_t i = 0; i < io.live.size(); ++i) {
    if (!io.active[i]) continue;
    const Array& t = io.live[i];
    if (auto dims = factored_dims(t.shape(), op)) {
      v_row[i] =
          zeros(without_axis(t.shape(), dims->second), t.dtype(), t.device());
      v_col[i] =
          zeros(without_axis(t.shape(), dims->first), t.dtype(), t.device());
    } else {
      v[i] = zeros_like(t);
    }
  }
  io.st.leaves["v_row"] = std::move(v_row);
  io.st.leaves["v_col"] = std::move(v_col);
  io.st.leaves["v"] = std::move(v);
  io.st.scalars["count"] = scalar_on(0, i32, io.device);
}
void update_stage(const ScaleByFactoredRms& op, StageIO& io) {
  std::vector<Array>& v_row = state_leaves(io.st, io.c, "v_row");
  std::vector<Array>& v_col = state_leaves(io.st, io.c, "v_col");
  std::vector<Array>& v = state_leaves(io.st, io.c, "v");
  const Array count = state_scalar(io.st, io.c, "count");
  // optax _decay_rate_pow: 1 - (step - offset + 1)^(-decay_rate) in f32.
  const Array t =
      astype(count - static_cast<double>(op.step_offset) + 1.0, f32);
  const Array decay = 1.0 - power(t, -op.decay_rate);
  const Array keep = 1.0 - decay;
  for (std::size_t i : io.active) {
    const Array& g = io.g[i];
    const Array d = astype(decay, g.dtype()), k = astype(keep, g.dtype());
    const Array g2 = g * g + op.eps;
    if (auto dims = factored_dims(g.shape(), op)) {
      const auto [d1, d0] = *dims;
      const Array row = state_entry_shaped(v_row, io.c, "v_row", i,
                                           without_axis(g.shape(), d0)) *
                            d +
                        mean(g2, d0) * k;
      const Array col = state_entry_shaped(v_col, io.c, "v_col", i,
                                           without_axis(g.shape(), d1)) *
                            d +
                        mean(g2, d1) * k;
      const std::int64_t reduced_d1 = d1 > d0 ? d1 - 1 : d1;
      const Array row_col_mean = mean(row, reduced_d1, /*keepdims=*/true);
      const Array row_factor = power(row / row_col_mean, -0.5);
      const Array col_factor = power(col, -0.5);
      io.g[i] = g * expand_dims(row_factor, d0) * expand_dims(col_factor, d1);
      v_row[i] = row;
      v_col[i] = col;
    } else {
      const Array nv = state_entry(v, io.c, "v", i, g) * d + g2 * k;
      io.g[i] = g * power(nv, -0.5);
      v[i] = nv;
    }
  }
  io.st.scalars["count"] = safe_increment(count);
}

void init_stage(const ClipByBlockRms&, InitIO&) {}
void update_stage(const ClipByBlockRms& op, StageIO& io) {
  for (std::size_t i : io.active) {
    const Array& u = io.g[i];
    io.g[i] = u / maximum(rms(u) / op.threshold, 1.0);
  }
}

void init_stage(const ScaleByParamBlockRms&, InitIO&) {}
void update_stage(const ScaleByParamBlockRms& op, StageIO& io) {
  if (io.active.empty()) return;
  io.require_params();
  for (std::size_t i : io.active) {
    io.g[i] = io.g[i] * astype(floor_at(rms(io.params[i]), op.min_scale),
                               io.g[i].dtype());
  }
}

void init_stage(const Scale&, InitIO&) {}
void update_stage(const Scale& op, StageIO& io) {
  const Hp s = io.hp("step_size", op.step_size);
  for (std::size_t i : io.active) io.g[i] = io.g[i] * s;
}

// ---- ema ----
void init_stage(const Ema&, InitIO& io) {
  io.st.leaves["ema"] = zeros_where_active(io);
  io.st.scalars["count"] = scalar_on(0, i32, io.device);
}
void update_stage(const Ema& op, StageIO& io) {
  std::vector<Array>& ema = state_leaves(io.st, io.c, "ema");
  const Hp decay = io.hp("decay", op.decay);
  const Array count = safe_increment(state_scalar(io.st, io.c, "count"));
  const Array bc = bias_correction(decay, count);
  for (std::size_t i : io.active) {
    const Array& g = io.g[i];
    const Array m =
        g * one_minus(decay) + state_entry(ema, io.c, "ema", i, g) * decay;
    io.g[i] = op.debias ? m / astype(bc, m.dtype()) : m;
    ema[i] = m;
  }
  io.st.scalars["count"] = count;
}

std::vector<std::pair<std::string, double>> injectable_hyperparameters(
    const StageOp& op) {
  using Out = std::vector<std::pair<std::string, double>>;
  return std::visit(
      [](const auto& o) -> Out {
        using Op = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<Op, ScaleByAdam>) {
          return {{"b1", o.b1},
                  {"b2", o.b2},
                  {"eps", o.eps},
                  {"eps_root", o.eps_root}};
        } else if constexpr (std::is_same_v<Op, ScaleByRms>) {
          return {{"decay", o.decay}, {"eps", o.eps}};
        } else if constexpr (std::is_same_v<Op, Momentum>) {
          return {{"momentum", o.decay}};
        } else if constexpr (std::is_same_v<Op, AddDecayedWeights>) {
          return {{"weight_decay", o.weight_decay}};
        } else if constexpr (std::is_same_v<Op, ClipByGlobalNorm>) {
          return {{"max_norm", o.max_norm}};
        } else if constexpr (std::is_same_v<Op, ScaleByLion>) {
          return {{"b1", o.b1}, {"b2", o.b2}};
        } else if constexpr (std::is_same_v<Op, ScaleByRss>) {
          return {{"eps", o.eps}};
        } else if constexpr (std::is_same_v<Op, Clip>) {
          return {{"max_delta", o.max_delta}};
        } else if constexpr (std::is_same_v<Op, ScaleByTrustRatio>) {
          return {{"trust_coefficient", o.trust_coefficient}, {"eps", o.eps}};
        } else if constexpr (std::is_same_v<Op, Scale>) {
          return {{"step_size", o.step_size}};
        } else if constexpr (std::is_same_v<Op, Ema>) {
          return {{"decay", o.decay}};
        } else {
          return {};
        }
      },
      op);
}

}  // namespace kiln::optim::detail
