// Executable: a traced, optimized program compiled for one device: its launch
// steps (fused elementwise groups and single bindings, dsl/fusion.hpp) and a
// memory plan. Running it binds no primitive through the tracer: each step goes
// straight to the device's Backend, every intermediate is released after its last
// use, and a donated input's buffer is handed to an elementwise step that writes
// an output of the same dtype and shape in its last use (in place).
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kiln/dsl/fusion.hpp"
#include "kiln/dsl/program.hpp"

namespace kiln {

struct RunStats {
  std::size_t launches = 0;     // steps run (kernels dispatched, roughly)
  // Most bytes of arrays the call held at once: its inputs, intermediates and
  // outputs (program constants live with the program and are not counted).
  std::size_t peak_bytes = 0;
  std::size_t reused_in_place = 0;  // outputs written into a dead input's buffer
};

class Executable {
 public:
  Executable(Program program, Device device, std::string name,
             const FusionOptions& options = {});
  Executable(const Executable&) = delete;
  Executable& operator=(const Executable&) = delete;

  // Runs on `inputs` (one per program input, consumed: the executable drops each
  // after its last use, so an input whose buffer nobody else holds is freed or
  // reused during the call). Returns one array per program output. The steps
  // run inside one ProgramScope (dsl/backend.hpp): on Vulkan the call is one
  // command buffer, submitted at the end without waiting for it.
  //
  // `held`: extra handles the caller keeps to some inputs' buffers (a jitted
  // call's donated arguments) so that it can give them back if the run throws.
  // Such a buffer is written in place only after the last step that can fail
  // on values (guard_step()), and the executable then resets the caller's
  // handle itself: a held buffer that is still set after a throw was neither
  // overwritten nor freed.
  std::vector<Array> run(std::vector<Array>& inputs, RunStats* stats = nullptr,
                         std::span<std::shared_ptr<Buffer>> held = {}) const;
  // The same on borrowed inputs (none donated): only the inputs the program
  // reads are touched.
  std::vector<Array> run(std::span<const Array* const> inputs, RunStats* stats = nullptr) const;

  // Whether the program reads input i (unused inputs may be passed as null).
  bool input_used(std::size_t i) const { return input_used_[i]; }
  // 1 + the last step that can throw on the values it reads (an index out of
  // range: a kValueChecked primitive, also inside a loop body), 0 if none.
  std::size_t guard_step() const { return guard_step_; }
  const Program& program() const { return program_; }
  const std::vector<Step>& steps() const { return steps_; }
  const std::string& name() const { return name_; }
  Device device() const { return device_; }
  // The program with its kernel boundaries.
  std::string to_string() const;

 private:
  void check_arity(std::size_t n) const;
  // Runs the steps on an environment whose inputs and constants are set.
  std::vector<Array> run_steps(std::vector<Array>& env, std::size_t live_bytes, RunStats* stats,
                               std::span<std::shared_ptr<Buffer>> held) const;

  Program program_;
  Device device_;
  std::string name_;
  std::vector<Step> steps_;
  // Per step: values whose last use is that step (released after it).
  std::vector<std::vector<ValueId>> release_after_;
  std::vector<bool> is_output_;
  std::vector<bool> is_constant_;
  std::vector<bool> input_used_;
  std::vector<std::size_t> used_inputs_;  // indices i with input_used_[i]
  std::size_t guard_step_ = 0;
  // Per step: the compiled sub-programs of a control-flow step (empty for
  // other steps), in detail::sub_programs order.
  std::vector<std::vector<std::unique_ptr<Executable>>> subs_;
};

}  // namespace kiln
