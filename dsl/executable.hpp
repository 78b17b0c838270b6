// Executable: a traced, optimized program compiled for one device: its launch
// steps (fused elementwise groups and single bindings, dsl/fusion.hpp) and a
// memory plan. Running it binds no primitive through the tracer: each step goes
// straight to the device's Backend, every intermediate is released after its last
// use, and a donated input's buffer is handed to an elementwise step that writes
// an output of the same dtype and shape in its last use (in place).
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "kiln/dsl/fusion.hpp"
#include "kiln/dsl/program.hpp"

namespace kiln {

struct RunStats {
  std::size_t launches = 0;     // steps run (kernels dispatched, roughly)
  std::size_t peak_bytes = 0;   // most bytes of arrays the call held at once
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
  std::vector<Array> run(std::vector<Array>& inputs, RunStats* stats = nullptr) const;

  const Program& program() const { return program_; }
  const std::vector<Step>& steps() const { return steps_; }
  const std::string& name() const { return name_; }
  Device device() const { return device_; }
  // The program with its kernel boundaries.
  std::string to_string() const;

 private:
  Program program_;
  Device device_;
  std::string name_;
  std::vector<Step> steps_;
  // Per step: values whose last use is that step (released after it).
  std::vector<std::vector<ValueId>> release_after_;
  std::vector<bool> is_output_;
};

}  // namespace kiln
