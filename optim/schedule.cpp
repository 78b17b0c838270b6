// Schedules as data, evaluated with DSL ops on an i32 count (see schedule.hpp).
// The arithmetic follows optax's formulas step by step in f32 (constants are
// combined in double first, as Python does before they meet an f32 array), so
// values agree with optax to f32 rounding.
#include "kiln/optim/schedule.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <ostream>

#include "kiln/dsl/ops.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::optim {

using kiln::detail::str_cat;

namespace {

Array as_f32(const Array& a) { return astype(a, f32); }

// optax.piecewise_interpolate_schedule: the values at the boundaries are a
// cumulative product in f32 (jnp.cumprod of the stacked floats), pct is
// (count - start) / max(interval, 1) in f32, and past the last boundary the
// last value holds.
Array eval_interpolate(const SchedulePiece& p, const Array& count) {
  std::vector<std::int64_t> bounds = {0};
  std::vector<float> values = {static_cast<float>(p.init_value)};
  for (const auto& [boundary, scale] : p.boundaries_and_scales) {
    bounds.push_back(boundary);
    values.push_back(values.back() * static_cast<float>(scale));
  }
  const Array zero = full_like(as_f32(count), 0.0);
  Array out = where(count >= static_cast<double>(bounds.back()),
                    full_like(zero, values.back()), zero);
  for (std::size_t i = 0; i + 1 < bounds.size(); ++i) {
    const double size = static_cast<double>(
        std::max<std::int64_t>(bounds[i + 1] - bounds[i], 1));
    const Array pct = as_f32(count - static_cast<double>(bounds[i])) / size;
    const float start = values[i], end = values[i + 1];
    Array interp;
    if (p.kind == SchedulePiece::Kind::kLinearInterpolate) {
      interp = pct * static_cast<double>(end - start) + start;
    } else {
      const float half = (start - end) / 2.0f;
      interp = (cos(pct * std::numbers::pi) + 1.0) * half + end;
    }
    const Array inside =
        logical_and(count >= static_cast<double>(bounds[i]),
                    count < static_cast<double>(bounds[i + 1]));
    out = where(inside, interp, out);
  }
  return out;
}

Array eval_piece(const SchedulePiece& p, const Array& count_i32) {
  const Array count =
      p.offset == 0 ? count_i32 : count_i32 - static_cast<double>(p.offset);
  switch (p.kind) {
    case SchedulePiece::Kind::kConstant:
      return full_like(as_f32(count), p.init_value);
    case SchedulePiece::Kind::kLinear: {
      if (p.steps <= 0) return full_like(as_f32(count), p.init_value);
      // optax: count = clip(count - begin, 0, steps); frac = 1 - count / steps
      Array c = count - static_cast<double>(p.begin);
      c = minimum(maximum(c, 0.0), static_cast<double>(p.steps));
      const Array frac = 1.0 - as_f32(c) / static_cast<double>(p.steps);
      return frac * (p.init_value - p.end_value) + p.end_value;
    }
    case SchedulePiece::Kind::kCosine: {
      const double steps = static_cast<double>(p.steps);
      const Array c = minimum(as_f32(count), steps);
      const Array cosine = (cos(c * std::numbers::pi / steps) + 1.0) * 0.5;
      const Array shaped =
          p.exponent == 1.0 ? cosine : power(cosine, p.exponent);
      return (shaped * (1.0 - p.alpha) + p.alpha) * p.init_value;
    }
    case SchedulePiece::Kind::kPiecewise: {
      Array v = full_like(as_f32(count), p.init_value);
      for (const auto& [boundary, scale] : p.boundaries_and_scales) {
        v = where(count >= static_cast<double>(boundary), v * scale, v);
      }
      return v;
    }
    case SchedulePiece::Kind::kLinearInterpolate:
    case SchedulePiece::Kind::kCosineInterpolate:
      return eval_interpolate(p, count);
  }
  throw ValueError("[optim.schedule] unknown schedule kind");
}

}  // namespace

Schedule::Schedule(double value) {
  SchedulePiece p;
  p.init_value = value;
  pieces_.push_back(std::move(p));
}

Schedule::Schedule(std::vector<SchedulePiece> pieces,
                   std::vector<std::int64_t> boundaries)
    : pieces_(std::move(pieces)), boundaries_(std::move(boundaries)) {
  if (pieces_.empty() || boundaries_.size() + 1 != pieces_.size()) {
    throw ValueError(str_cat(
        "[optim.schedule] a schedule needs one boundary fewer than pieces, "
        "got ",
        pieces_.size(), " pieces and ", boundaries_.size(), " boundaries"));
  }
}

bool Schedule::is_constant() const {
  return pieces_.size() == 1 &&
         pieces_[0].kind == SchedulePiece::Kind::kConstant;
}

double Schedule::constant_value() const {
  if (!is_constant()) {
    throw ValueError(str_cat("[optim.schedule] ", *this, " is not a constant"));
  }
  return pieces_[0].init_value;
}

namespace {

void check_count(const Array& count) {
  if (count.is_null() || count.dtype() != i32 || count.ndim() != 0) {
    throw DTypeError(
        str_cat("[optim.schedule] the step count must be an i32 scalar, got ",
                count.is_null()
                    ? std::string("None")
                    : str_cat(name(count.dtype()), to_string(count.shape()))));
  }
}

using Lookup = std::function<Array(const std::string&)>;

// eval_piece with piece k's numbers from `lookup` (see Schedule::parameters),
// in f32 (integers in i32).
Array eval_piece_dynamic(const SchedulePiece& p, std::size_t k,
                         const Array& count_i32, const Lookup& lookup) {
  auto f = [&](const std::string& field) {
    return astype(lookup(str_cat("schedule[", k, "].", field)), f32);
  };
  auto n = [&](const std::string& field) {
    return astype(lookup(str_cat("schedule[", k, "].", field)), i32);
  };
  const Array count = count_i32 - n("offset");
  switch (p.kind) {
    case SchedulePiece::Kind::kConstant:
      return f("init_value");
    case SchedulePiece::Kind::kLinear: {
      const Array steps = n("steps");
      Array c = count - n("begin");
      c = minimum(maximum(c, 0.0), steps);
      const Array frac = 1.0 - as_f32(c) / as_f32(maximum(steps, 1.0));
      const Array init = f("init_value"), end = f("end_value");
      return where(less_equal(steps, full_like(steps, 0.0)), init,
                   frac * (init - end) + end);
    }
    case SchedulePiece::Kind::kCosine: {
      const Array steps = as_f32(n("steps"));
      const Array c = minimum(as_f32(count), steps);
      const Array cosine = (cos(c * std::numbers::pi / steps) + 1.0) * 0.5;
      const Array exponent = f("exponent");
      const Array shaped = where(equal(exponent, full_like(exponent, 1.0)),
                                 cosine, power(cosine, exponent));
      const Array alpha = f("alpha");
      return (shaped * (1.0 - alpha) + alpha) * f("init_value");
    }
    case SchedulePiece::Kind::kPiecewise: {
      Array v = f("init_value");
      for (std::size_t j = 0; j < p.boundaries_and_scales.size(); ++j) {
        const Array b = n(str_cat("boundary[", j, "]"));
        v = where(greater_equal(count, b), v * f(str_cat("scale[", j, "]")), v);
      }
      return v;
    }
    case SchedulePiece::Kind::kLinearInterpolate:
    case SchedulePiece::Kind::kCosineInterpolate: {
      std::vector<Array> bounds = {full_like(count, 0.0)};
      std::vector<Array> values = {f("init_value")};
      for (std::size_t j = 0; j < p.boundaries_and_scales.size(); ++j) {
        bounds.push_back(n(str_cat("boundary[", j, "]")));
        values.push_back(values.back() * f(str_cat("scale[", j, "]")));
      }
      const Array zero = full_like(values[0], 0.0);
      Array out =
          where(greater_equal(count, bounds.back()), values.back(), zero);
      for (std::size_t i = 0; i + 1 < bounds.size(); ++i) {
        const Array size = maximum(bounds[i + 1] - bounds[i], 1.0);
        const Array pct = as_f32(count - bounds[i]) / as_f32(size);
        const Array& start = values[i];
        const Array& end = values[i + 1];
        const Array interp =
            p.kind == SchedulePiece::Kind::kLinearInterpolate
                ? pct * (end - start) + start
                : (cos(pct * std::numbers::pi) + 1.0) * ((start - end) / 2.0) +
                      end;
        const Array inside = logical_and(greater_equal(count, bounds[i]),
                                         less(count, bounds[i + 1]));
        out = where(inside, interp, out);
      }
      return out;
    }
  }
  throw ValueError("[optim.schedule] unknown schedule kind");
}

}  // namespace

std::vector<Schedule::Parameter> Schedule::parameters() const {
  std::vector<Parameter> out;
  for (std::size_t k = 0; k < pieces_.size(); ++k) {
    const SchedulePiece& p = pieces_[k];
    auto add = [&](const std::string& field, double v, bool integer) {
      out.push_back({str_cat("schedule[", k, "].", field), v, integer});
    };
    add("init_value", p.init_value, false);
    add("offset", static_cast<double>(p.offset), true);
    switch (p.kind) {
      case SchedulePiece::Kind::kConstant:
        break;
      case SchedulePiece::Kind::kLinear:
        add("end_value", p.end_value, false);
        add("steps", static_cast<double>(p.steps), true);
        add("begin", static_cast<double>(p.begin), true);
        break;
      case SchedulePiece::Kind::kCosine:
        add("steps", static_cast<double>(p.steps), true);
        add("alpha", p.alpha, false);
        add("exponent", p.exponent, false);
        break;
      case SchedulePiece::Kind::kPiecewise:
      case SchedulePiece::Kind::kLinearInterpolate:
      case SchedulePiece::Kind::kCosineInterpolate:
        for (std::size_t j = 0; j < p.boundaries_and_scales.size(); ++j) {
          add(str_cat("boundary[", j, "]"),
              static_cast<double>(p.boundaries_and_scales[j].first), true);
          add(str_cat("scale[", j, "]"), p.boundaries_and_scales[j].second,
              false);
        }
        break;
    }
  }
  for (std::size_t i = 0; i < boundaries_.size(); ++i) {
    out.push_back({str_cat("schedule.boundary[", i, "]"),
                   static_cast<double>(boundaries_[i]), true});
  }
  return out;
}

Array Schedule::operator()(const Array& count, const Lookup& lookup) const {
  check_count(count);
  Array out = eval_piece_dynamic(pieces_[0], 0, count, lookup);
  for (std::size_t i = 0; i < boundaries_.size(); ++i) {
    const Array b = astype(lookup(str_cat("schedule.boundary[", i, "]")), i32);
    out = where(less(count, b), out,
                eval_piece_dynamic(pieces_[i + 1], i + 1, count, lookup));
  }
  return out;
}

Array Schedule::operator()(const Array& count) const {
  check_count(count);
  Array out = eval_piece(pieces_[0], count);
  for (std::size_t i = 0; i < boundaries_.size(); ++i) {
    out = where(count < static_cast<double>(boundaries_[i]), out,
                eval_piece(pieces_[i + 1], count));
  }
  return out;
}

double Schedule::at(std::int64_t count) const {
  if (count < 0 || count > std::numeric_limits<std::int32_t>::max()) {
    throw ValueError(
        str_cat("[optim.schedule] step ", count, " is outside the i32 range"));
  }
  return (*this)(scalar<std::int32_t>(static_cast<std::int32_t>(count)))
      .item<float>();
}

std::ostream& operator<<(std::ostream& os, const Schedule& s) {
  auto piece = [&os](const SchedulePiece& p) {
    switch (p.kind) {
      case SchedulePiece::Kind::kConstant:
        os << p.init_value;
        break;
      case SchedulePiece::Kind::kLinear:
        os << "linear(" << p.init_value << " -> " << p.end_value
           << ", steps=" << p.steps << ", begin=" << p.begin << ")";
        break;
      case SchedulePiece::Kind::kCosine:
        os << "cosine_decay(init=" << p.init_value << ", steps=" << p.steps
           << ", alpha=" << p.alpha << ", exponent=" << p.exponent << ")";
        break;
      case SchedulePiece::Kind::kPiecewise:
        os << "piecewise_constant(init=" << p.init_value;
        for (const auto& [b, sc] : p.boundaries_and_scales)
          os << ", " << b << ": x" << sc;
        os << ")";
        break;
      case SchedulePiece::Kind::kLinearInterpolate:
      case SchedulePiece::Kind::kCosineInterpolate:
        os << (p.kind == SchedulePiece::Kind::kLinearInterpolate ? "linear"
                                                                 : "cosine")
           << "_interpolate(init=" << p.init_value;
        for (const auto& [b, sc] : p.boundaries_and_scales)
          os << ", " << b << ": x" << sc;
        os << ")";
        break;
    }
    if (p.offset != 0) os << " from step " << p.offset;
  };
  if (s.pieces().size() == 1) {
    piece(s.pieces()[0]);
    return os;
  }
  os << "join(";
  piece(s.pieces()[0]);
  for (std::size_t i = 0; i < s.boundaries().size(); ++i) {
    os << ", @" << s.boundaries()[i] << " ";
    piece(s.pieces()[i + 1]);
  }
  return os << ")";
}

Schedule constant_schedule(double value) { return Schedule(value); }

Schedule linear_schedule(double init_value, double end_value,
                         std::int64_t transition_steps,
                         std::int64_t transition_begin) {
  SchedulePiece p;
  p.kind = SchedulePiece::Kind::kLinear;
  p.init_value = init_value;
  p.end_value = end_value;
  p.steps = transition_steps;
  p.begin = transition_begin < 0 ? 0 : transition_begin;  // as optax
  return Schedule({p}, {});
}

Schedule cosine_decay_schedule(double init_value, std::int64_t decay_steps,
                               double alpha, double exponent) {
  if (decay_steps <= 0) {
    throw ValueError(str_cat(
        "[optim.cosine_decay_schedule] decay_steps must be positive, got ",
        decay_steps));
  }
  SchedulePiece p;
  p.kind = SchedulePiece::Kind::kCosine;
  p.init_value = init_value;
  p.steps = decay_steps;
  p.alpha = alpha;
  p.exponent = exponent;
  return Schedule({p}, {});
}

Schedule piecewise_constant_schedule(
    double init_value,
    std::vector<std::pair<std::int64_t, double>> boundaries_and_scales) {
  std::sort(boundaries_and_scales.begin(), boundaries_and_scales.end());
  SchedulePiece p;
  p.kind = SchedulePiece::Kind::kPiecewise;
  p.init_value = init_value;
  p.boundaries_and_scales = std::move(boundaries_and_scales);
  return Schedule({p}, {});
}

Schedule piecewise_interpolate_schedule(
    std::string_view interpolate_type, double init_value,
    std::vector<std::pair<std::int64_t, double>> boundaries_and_scales) {
  SchedulePiece p;
  if (interpolate_type == "linear") {
    p.kind = SchedulePiece::Kind::kLinearInterpolate;
  } else if (interpolate_type == "cosine") {
    p.kind = SchedulePiece::Kind::kCosineInterpolate;
  } else {
    throw ValueError(str_cat(
        "[optim.piecewise_interpolate_schedule] interpolate_type must be "
        "'linear' or 'cosine', got '",
        interpolate_type, "'"));
  }
  // As a Python dict literal: the last entry for a boundary wins.
  std::vector<std::pair<std::int64_t, double>> unique;
  for (const auto& [b, s] : boundaries_and_scales) {
    auto it = std::find_if(unique.begin(), unique.end(),
                           [b = b](const auto& e) { return e.first == b; });
    if (it != unique.end()) {
      it->second = s;
    } else {
      unique.emplace_back(b, s);
    }
    if (s < 0) {
      throw ValueError(
          str_cat("[optim.piecewise_interpolate_schedule] scales must be "
                  "non-negative, got ",
                  s, " at boundary ", b));
    }
  }
  std::sort(unique.begin(), unique.end());
  p.init_value = init_value;
  p.boundaries_and_scales = std::move(unique);
  return Schedule({p}, {});
}

namespace {
void check_transition_steps(std::string_view op, std::int64_t steps) {
  if (steps <= 0) {
    throw ValueError(str_cat(
        "[optim.", op, "] transition_steps must be positive, got ", steps));
  }
}
}  // namespace

Schedule linear_onecycle_schedule(std::int64_t transition_steps,
                                  double peak_value, double pct_start,
                                  double pct_final, double div_factor,
                                  double final_div_factor) {
  check_transition_steps("linear_onecycle_schedule", transition_steps);
  const double steps = static_cast<double>(transition_steps);
  return piecewise_interpolate_schedule(
      "linear", peak_value / div_factor,
      {{static_cast<std::int64_t>(pct_start * steps), div_factor},
       {static_cast<std::int64_t>(pct_final * steps), 1.0 / div_factor},
       {transition_steps, 1.0 / final_div_factor}});
}

Schedule cosine_onecycle_schedule(std::int64_t transition_steps,
                                  double peak_value, double pct_start,
                                  double div_factor, double final_div_factor) {
  check_transition_steps("cosine_onecycle_schedule", transition_steps);
  const double steps = static_cast<double>(transition_steps);
  return piecewise_interpolate_schedule(
      "cosine", peak_value / div_factor,
      {{static_cast<std::int64_t>(pct_start * steps), div_factor},
       {transition_steps, 1.0 / (div_factor * final_div_factor)}});
}

Schedule join_schedules(const std::vector<Schedule>& schedules,
                        const std::vector<std::int64_t>& boundaries) {
  if (schedules.empty() || boundaries.size() + 1 != schedules.size()) {
    throw ValueError(str_cat(
        "[optim.join_schedules] needs one boundary fewer than schedules, got ",
        schedules.size(), " schedules and ", boundaries.size(), " boundaries"));
  }
  // Sequential `where(count < b, out, next(count - b))`, flattened: the pieces
  // of schedule i are shifted by boundaries[i-1] (nested joins stay exact).
  std::vector<SchedulePiece> pieces;
  std::vector<std::int64_t> bounds;
  for (std::size_t i = 0; i < schedules.size(); ++i) {
    const std::int64_t shift = i == 0 ? 0 : boundaries[i - 1];
    if (i > 0) bounds.push_back(shift);
    const Schedule& s = schedules[i];
    for (std::size_t k = 0; k < s.pieces().size(); ++k) {
      SchedulePiece p = s.pieces()[k];
      p.offset += shift;
      if (k > 0) bounds.push_back(s.boundaries()[k - 1] + shift);
      pieces.push_back(std::move(p));
    }
  }
  return Schedule(std::move(pieces), std::move(bounds));
}

Schedule warmup_cosine_decay_schedule(double init_value, double peak_value,
                                      std::int64_t warmup_steps,
                                      std::int64_t decay_steps,
                                      double end_value, double exponent) {
  const double alpha = peak_value == 0.0 ? 0.0 : end_value / peak_value;
  return join_schedules(
      {linear_schedule(init_value, peak_value, warmup_steps),
       cosine_decay_schedule(peak_value, decay_steps - warmup_steps, alpha,
                             exponent)},
      {warmup_steps});
}

}  // namespace kiln::optim
