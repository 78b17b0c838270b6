// Learning-rate schedules (optax.schedules): value types that describe a
// function of the step count and evaluate it with DSL ops on a dynamic i32
// count, so a schedule inside a jitted step is traced once, not once per step.
// They are plain data (kind + numbers, no callables) so that an optimizer that
// holds one stays a hashable, ==-comparable static value.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/hash/hash.h"
#include "kiln/runtime/array.hpp"
#include "kiln/runtime/static_kind.hpp"

namespace kiln::optim {

// One basic schedule, evaluated at (count - offset).
struct SchedulePiece {
  enum class Kind : std::uint8_t {
    kConstant,
    kLinear,
    kCosine,
    kPiecewise,
    kLinearInterpolate,  // piecewise_interpolate_schedule("linear", ...)
    kCosineInterpolate,  // piecewise_interpolate_schedule("cosine", ...)
  };
  Kind kind = Kind::kConstant;
  double init_value = 0;
  double end_value = 0;    // kLinear
  std::int64_t steps = 0;  // kLinear: transition steps; kCosine: decay steps
  std::int64_t begin = 0;  // kLinear: transition_begin
  double alpha = 0;        // kCosine: final value as a fraction of init
  double exponent = 1;     // kCosine
  std::vector<std::pair<std::int64_t, double>>
      boundaries_and_scales;  // kPiecewise, k*Interpolate
  std::int64_t offset = 0;    // set by join_schedules

  friend bool operator==(const SchedulePiece&, const SchedulePiece&) = default;
  template <class H>
  friend H AbslHashValue(H h, const SchedulePiece& p) {
    return H::combine(std::move(h), p.kind, p.init_value, p.end_value, p.steps,
                      p.begin, p.alpha, p.exponent, p.boundaries_and_scales,
                      p.offset);
  }
};

// pieces[0] until boundaries[0], then pieces[1] (evaluated at count - its
// offset) until boundaries[1], ... (optax.join_schedules). A double converts to
// a constant schedule, so `adam(1e-3)` and `adam(cosine_decay_schedule(...))`
// read the same.
class Schedule {
 public:
  // Owns its pieces by value, and == and the hash cover them: a static value.
  KILN_STATIC_VALUE(Schedule);
  Schedule() : Schedule(0.0) {}
  Schedule(double value);  // NOLINT: implicit by design (a constant)
  Schedule(std::vector<SchedulePiece> pieces,
           std::vector<std::int64_t> boundaries);

  bool is_constant() const;
  // The constant's value (ValueError when the schedule is not constant).
  double constant_value() const;
  // Value at `count` (an i32 0-d array, possibly a tracer) as an f32 0-d array.
  Array operator()(const Array& count) const;
  // Convenience for tests and logging: the value at an integer step.
  double at(std::int64_t count) const;

  // The numbers of this schedule by name ("schedule[1].init_value",
  // "schedule.boundary[0]", ...), for keeping them in an optimizer state
  // (inject_hyperparams(opt, {"learning_rate"})). Integers (steps,
  // boundaries) are i32 there, the rest f32. Two schedules of the same
  // shape (same kinds of pieces, same number of boundaries and scales) have
  // the same names.
  struct Parameter {
    std::string name;
    double value;
    bool integer;
  };
  std::vector<Parameter> parameters() const;
  // The value at `count` with every number read from `lookup(name)` (a 0-d
  // i32 or f32 array, possibly a tracer) instead of from this schedule:
  // the schedule's shape is static, its numbers dynamic. f32 arithmetic
  // throughout (Optax's, when its schedule gets jnp arrays).
  Array operator()(
      const Array& count,
      const std::function<Array(const std::string&)>& lookup) const;

  const std::vector<SchedulePiece>& pieces() const { return pieces_; }
  const std::vector<std::int64_t>& boundaries() const { return boundaries_; }

  friend bool operator==(const Schedule&, const Schedule&) = default;
  template <class H>
  friend H AbslHashValue(H h, const Schedule& s) {
    return H::combine(std::move(h), s.pieces_, s.boundaries_);
  }

 private:
  std::vector<SchedulePiece> pieces_;
  std::vector<std::int64_t> boundaries_;
};

// "cosine_decay(init=0.1, steps=100, alpha=0)", joins as "join(a, b @ 10)".
std::ostream& operator<<(std::ostream& os, const Schedule& s);

Schedule constant_schedule(double value);
// Linear from init_value to end_value over transition_steps, starting at
// transition_begin (optax.linear_schedule).
Schedule linear_schedule(double init_value, double end_value,
                         std::int64_t transition_steps,
                         std::int64_t transition_begin = 0);
// init * ((1 - alpha) * (0.5 * (1 + cos(pi * min(t, T) / T)))^exponent + alpha)
// (optax.cosine_decay_schedule).
Schedule cosine_decay_schedule(double init_value, std::int64_t decay_steps,
                               double alpha = 0.0, double exponent = 1.0);
// init_value times the scale of every boundary that count has reached
// (optax.piecewise_constant_schedule).
Schedule piecewise_constant_schedule(
    double init_value,
    std::vector<std::pair<std::int64_t, double>> boundaries_and_scales);
// Interpolates (linearly, or along half a cosine) between init_value and
// init_value times the product of the scales reached, from one boundary to the
// next (optax.piecewise_interpolate_schedule; kind "linear" or "cosine").
// A later entry for the same boundary replaces an earlier one.
Schedule piecewise_interpolate_schedule(
    std::string_view interpolate_type, double init_value,
    std::vector<std::pair<std::int64_t, double>> boundaries_and_scales);
// One-cycle: linear from peak/div_factor up to peak at pct_start, back down
// by pct_final, then to peak/(div_factor*final_div_factor) at
// transition_steps (optax.linear_onecycle_schedule).
Schedule linear_onecycle_schedule(std::int64_t transition_steps,
                                  double peak_value, double pct_start = 0.3,
                                  double pct_final = 0.85,
                                  double div_factor = 25.0,
                                  double final_div_factor = 1e4);
// One-cycle along half cosines: up to peak at pct_start, down to
// peak/(div_factor*final_div_factor) at transition_steps
// (optax.cosine_onecycle_schedule).
Schedule cosine_onecycle_schedule(std::int64_t transition_steps,
                                  double peak_value, double pct_start = 0.3,
                                  double div_factor = 25.0,
                                  double final_div_factor = 1e4);
// schedules[0] before boundaries[0], then schedules[i] at (count -
// boundaries[i-1]) (optax.join_schedules). Needs one boundary fewer than
// schedules.
Schedule join_schedules(const std::vector<Schedule>& schedules,
                        const std::vector<std::int64_t>& boundaries);
// Linear warmup from init_value to peak_value over warmup_steps, then cosine
// decay to end_value at decay_steps (optax.warmup_cosine_decay_schedule).
Schedule warmup_cosine_decay_schedule(double init_value, double peak_value,
                                      std::int64_t warmup_steps,
                                      std::int64_t decay_steps,
                                      double end_value = 0.0,
                                      double exponent = 1.0);

}  // namespace kiln::optim
