// Running a compiled program: steps in order, liveness-based release, in-place
// reuse of dead inputs for elementwise outputs.
#include "kiln/dsl/executable.hpp"

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "kiln/dsl/backend.hpp"
#include "kiln/dsl/control_run.hpp"
#include "kiln/dsl/ops.hpp"
#include "kiln/runtime/env.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln {

Executable::Executable(Program program, Device device, std::string name,
                       const FusionOptions& options)
    : program_(std::move(program)), device_(device), name_(std::move(name)) {
  // Constants (arrays the function captured, folded values) run where the
  // program runs: one captured on another device is copied there once, here,
  // as jax.jit puts a captured array on the computation's device.
  for (Array& c : program_.constant_values) {
    if (!c.is_null() && c.device() != device_) c = to_device(c, device_);
  }
  FusionOptions fusion = options;
  fusion.windows = fusion.windows && fusion.enabled && backend_for(device_).fuses_windows();
  steps_ = fuse(program_, fusion);
  subs_.resize(steps_.size());
  for (std::size_t s = 0; s < steps_.size(); ++s) {
    const Equation* eq = steps_[s].equation;
    if (eq == nullptr || family(eq->prim) != PrimFamily::kControl) continue;
    for (const ProgramRef& sub : detail::sub_programs(eq->prim, eq->params)) {
      subs_[s].push_back(std::make_unique<Executable>(
          *sub, device_, detail::str_cat(name_, "/", kiln::name(eq->prim)), options));
    }
  }
  for (std::size_t s = 0; s < steps_.size(); ++s) {
    const Equation* eq = steps_[s].equation;
    bool may_throw = eq != nullptr && has_trait(eq->prim, PrimTrait::kValueChecked);
    for (const auto& sub : subs_[s]) may_throw = may_throw || sub->guard_step() > 0;
    if (may_throw) guard_step_ = s + 1;
  }
  is_output_.assign(program_.num_values(), false);
  is_constant_.assign(program_.num_values(), false);
  for (ValueId v : program_.constants) is_constant_[v] = true;
  for (ValueId v : program_.outputs) is_output_[v] = true;
  std::vector<int> last_use(program_.num_values(), -1);
  for (std::size_t s = 0; s < steps_.size(); ++s) {
    for (ValueId v : steps_[s].inputs) last_use[v] = static_cast<int>(s);
  }
  input_used_.resize(program_.inputs.size());
  for (std::size_t i = 0; i < program_.inputs.size(); ++i) {
    const ValueId v = program_.inputs[i];
    input_used_[i] = last_use[v] >= 0 || is_output_[v];
    if (input_used_[i]) used_inputs_.push_back(i);
  }
  release_after_.resize(steps_.size());
  for (std::size_t v = 0; v < last_use.size(); ++v) {
    if (last_use[v] >= 0 && !is_output_[v]) {
      release_after_[last_use[v]].push_back(static_cast<ValueId>(v));
    }
  }
}

std::string Executable::to_string() const {
  return detail::str_cat(name_, " on ", device_.to_string(), ": ", kiln::to_string(program_, steps_));
}

namespace {

// The value environment of a run: a per-thread vector reused between calls
// (a nested run finds it taken and gets its own). Every slot is empty again
// when the lease ends, also when a step throws.
class EnvLease {
 public:
  explicit EnvLease(std::size_t n) : values(std::move(scratch())) { values.resize(n); }
  ~EnvLease() {
    for (Array& a : values) a = Array();
    values.clear();
    scratch() = std::move(values);
  }
  EnvLease(const EnvLease&) = delete;
  EnvLease& operator=(const EnvLease&) = delete;
  std::vector<Array> values;

 private:
  static std::vector<Array>& scratch() {
    thread_local std::vector<Array> s;
    return s;
  }
};

}  // namespace

void Executable::check_arity(std::size_t n) const {
  if (n != program_.inputs.size()) {
    throw ValueError(detail::str_cat("[", name_, "] takes ", program_.inputs.size(),
                                     " arrays, got ", n));
  }
}

std::vector<Array> Executable::run(std::vector<Array>& inputs, RunStats* stats,
                                   std::span<std::shared_ptr<Buffer>> held) const {
  check_arity(inputs.size());
  EnvLease env(program_.num_values());
  std::size_t live_bytes = 0;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].is_null()) continue;  // unused input
    live_bytes += inputs[i].nbytes();
    env.values[program_.inputs[i]] = std::move(inputs[i]);
  }
  inputs.clear();
  return run_steps(env.values, live_bytes, stats, held);
}

std::vector<Array> Executable::run(std::span<const Array* const> inputs, RunStats* stats) const {
  check_arity(inputs.size());
  EnvLease env(program_.num_values());
  std::size_t live_bytes = 0;
  for (std::size_t i : used_inputs_) {
    live_bytes += inputs[i]->nbytes();
    env.values[program_.inputs[i]] = *inputs[i];
  }
  return run_steps(env.values, live_bytes, stats, {});
}

namespace {
// Whether `a`'s buffer may be overwritten: `a` is its only handle, or the only
// other one is the caller's in `held`, which is then given up (reset).
bool take_sole(const Array& a, std::span<std::shared_ptr<Buffer>> held) {
  if (a.sole_owner()) return true;
  if (held.empty() || !a.sole_owner(0, 1)) return false;
  for (std::shared_ptr<Buffer>& h : held) {
    if (h != a.buffer()) continue;
    h.reset();
    return true;
  }
  return false;
}
}  // namespace

std::vector<Array> Executable::run_steps(std::vector<Array>& env, std::size_t live_bytes,
                                         RunStats* stats,
                                         std::span<std::shared_ptr<Buffer>> held) const {
  const Program& p = program_;
  Backend& backend = backend_for(device_);
  RunStats local;
  // Constants belong to the program (alive between calls): not counted.
  for (std::size_t i = 0; i < p.constants.size(); ++i) env[p.constants[i]] = p.constant_values[i];
  local.peak_bytes = live_bytes;
  absl::InlinedVector<Array, 4> args;
  std::vector<std::shared_ptr<Buffer>> into;
  // The whole call is one unit of work for the backend (Vulkan: one command
  // buffer submitted at the end, not waited for).
  ProgramScope scope(backend);
  for (std::size_t s = 0; s < steps_.size(); ++s) {
    const Step& step = steps_[s];
    bool launched = true;
    if (step.equation != nullptr && !subs_[s].empty()) {
      // Control flow: the driver runs the compiled bodies (dsl/control_run.hpp).
      args.clear();
      for (ValueId v : step.inputs) args.push_back(env[v]);
      const Equation& eq = *step.equation;
      const auto ids = outputs_of(eq);
      std::vector<Aval> outs;
      for (ValueId v : ids) outs.push_back(p.avals[v]);
      std::size_t body_peak = 0;
      std::vector<Array> results = detail::run_control(
          eq.prim, eq.params, args, outs, [&](std::size_t k, std::vector<Array> in) {
            // The body's peak counts its inputs, which the call holds already.
            std::size_t in_bytes = 0;
            for (const Array& a : in) in_bytes += a.nbytes();
            RunStats st;
            std::vector<Array> r = subs_[s][k]->run(in, &st);
            body_peak = std::max(body_peak, st.peak_bytes - std::min(st.peak_bytes, in_bytes));
            local.launches += st.launches;
            return r;
          });
      local.peak_bytes = std::max(local.peak_bytes, live_bytes + body_peak);
      for (std::size_t i = 0; i < ids.size(); ++i) {
        live_bytes += results[i].nbytes();
        env[ids[i]] = std::move(results[i]);
      }
    } else if (step.equation != nullptr && has_trait(step.equation->prim, PrimTrait::kAlias)) {
      // reshape, bitcast, stop_gradient: the operand's bytes under the
      // result's aval (arrays are immutable), no backend call, no launch.
      const Equation& eq = *step.equation;
      const Aval& out = p.avals[eq.output];
      env[eq.output] = Array(out.dtype, out.shape, env[eq.inputs[0]].buffer());
      live_bytes += env[eq.output].nbytes();
      launched = false;
    } else if (step.equation != nullptr) {
      args.clear();
      for (ValueId v : step.inputs) args.push_back(env[v]);
      const Equation& eq = *step.equation;
      const Aval& out = p.avals[eq.output];
      env[eq.output] =
          Array(out.dtype, out.shape, backend.eval_step(eq.prim, eq.params, args, out, step.cache));
      live_bytes += env[eq.output].nbytes();
    } else {
      // In place: an input that dies here, with an output's exact aval and a
      // buffer no other handle reaches, receives that output.
      into.assign(step.outputs.size(), nullptr);
      const std::vector<ValueId>& dying = release_after_[s];
      args.clear();
      // KILN_INPLACE=0: never offer a dying input's buffer (a kill switch).
      static const bool no_inplace = !detail::env::flag("KILN_INPLACE").value_or(true);
      // A buffer the caller holds to restore a donated argument is taken only
      // once no later step can throw on values (failure atomicity).
      const std::span<std::shared_ptr<Buffer>> givable =
          s >= guard_step_ ? held : std::span<std::shared_ptr<Buffer>>();
      for (std::size_t o = 0; o < step.outputs.size() && !no_inplace; ++o) {
        const Aval& out = p.avals[step.outputs[o]];
        for (ValueId v : step.inputs) {
          if (p.avals[v] != out ||
              std::find(dying.begin(), dying.end(), v) == dying.end() ||
              std::find(into.begin(), into.end(), env[v].buffer()) != into.end() ||
              !take_sole(env[v], givable)) {
            continue;
          }
          into[o] = env[v].buffer();
          break;
        }
      }
      for (ValueId v : step.inputs) args.push_back(env[v]);
      std::vector<std::shared_ptr<Buffer>> bufs = backend.eval_fused(*step.kernel, args, into);
      for (std::size_t o = 0; o < step.outputs.size(); ++o) {
        const Aval& out = p.avals[step.outputs[o]];
        if (into[o] != nullptr && bufs[o] == into[o]) {
          ++local.reused_in_place;
        } else {
          into[o] = nullptr;  // the backend did not take it
          live_bytes += numel(out.shape) * size_of(out.dtype);
        }
        env[step.outputs[o]] = Array(out.dtype, out.shape, std::move(bufs[o]));
      }
    }
    if (launched) ++local.launches;
    local.peak_bytes = std::max(local.peak_bytes, live_bytes);
    args.clear();
    for (ValueId v : release_after_[s]) {
      const bool reused = step.kernel != nullptr &&
                          std::find(into.begin(), into.end(), env[v].buffer()) != into.end();
      // A buffer the caller holds for restoring a donation stays allocated.
      const bool kept = !held.empty() && env[v].buffer() != nullptr &&
                        env[v].buffer().use_count() > 1 &&
                        std::find(held.begin(), held.end(), env[v].buffer()) != held.end();
      if (!reused && !kept && !is_constant_[v]) live_bytes -= env[v].nbytes();
      env[v] = Array();
    }
  }
  std::vector<Array> outs;
  outs.reserve(p.outputs.size());
  for (ValueId v : p.outputs) outs.push_back(env[v]);  // a value may be returned twice
  env.clear();
  scope.end();
  if (stats != nullptr) *stats = local;
  return outs;
}

}  // namespace kiln
