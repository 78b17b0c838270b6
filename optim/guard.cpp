// The guards of multi_steps and apply_if_finite: inner stages whose new
// state and updates are kept or dropped by a dynamic bool, with `where` (a
// select, not a product: 0 * inf would be NaN), so one program serves both
// outcomes.
#include "kiln/optim/loss_scale.hpp"
#include "kiln/optim/stage_math.hpp"

namespace kiln::optim::detail {
namespace {

Array zero_unless(const Array& keep, const Array& g) {
  return g.is_null() ? g : where(keep, g, zeros_like(g));
}

}  // namespace

void open_guard(std::vector<Guard>& open, const State& out, std::size_t k,
                std::int64_t inner, const Array& keep,
                const std::vector<std::size_t>& active, std::vector<Array>& g) {
  if (inner == 0) {
    for (std::size_t i : active) g[i] = zero_unless(keep, g[i]);
    return;
  }
  const std::size_t last = k + static_cast<std::size_t>(inner);
  open.push_back(
      Guard{k + 1, last, keep,
            std::vector<StageState>(
                out.stages.begin() + static_cast<std::ptrdiff_t>(k + 1),
                out.stages.begin() + static_cast<std::ptrdiff_t>(last + 1)),
            active});
}

void close_guard(const Guard& guard, State& out, std::vector<Array>& g) {
  for (std::size_t k = guard.first; k <= guard.last; ++k) {
    StageState& now = out.stages[k];
    const StageState& was = guard.before[k - guard.first];
    for (auto& [key, entries] : now.leaves) {
      const std::vector<Array>& old = was.leaves.at(key);
      for (std::size_t i = 0; i < entries.size(); ++i) {
        if (!entries[i].is_null())
          entries[i] = where(guard.keep, entries[i], old[i]);
      }
    }
    for (auto& [key, value] : now.scalars) {
      auto it = was.scalars.find(key);
      if (it != was.scalars.end()) value = where(guard.keep, value, it->second);
    }
  }
  for (std::size_t i : guard.active) g[i] = zero_unless(guard.keep, g[i]);
}

Array apply_if_finite_keep(const ApplyIfFinite& op, StageState& st,
                           const StageCtx& c, const std::vector<Array>& g,
                           const std::vector<std::size_t>& active) {
  // optax.apply_if_finite's update, with where for lax.cond.
  const Array count = state_scalar(st, c, "notfinite_count");
  const Array total = state_scalar(st, c, "total_notfinite");
  std::vector<Array> seen;
  for (std::size_t i : active) seen.push_back(g[i]);
  const Array finite = all_finite_leaves(seen, count.device());
  const Array bad_run = where(finite, zeros_like(count), safe_increment(count));
  st.scalars["notfinite_count"] = bad_run;
  st.scalars["last_finite"] = finite;
  st.scalars["total_notfinite"] = where(finite, total, safe_increment(total));
  return logical_or(finite,
                    bad_run > static_cast<double>(op.max_consecutive_errors));
}

}  // namespace kiln::optim::detail
