// The interface a device backend implements for eager execution. dsl/ declares it,
// backends/ implement it, and backends/registry.cpp maps a Device to its backend.
#pragma once

#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "kiln/dsl/primitive.hpp"

namespace kiln {

struct FusedKernel;  // dsl/fusion.hpp
class KernelCache;   // dsl/fusion.hpp

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  // Runs one primitive; returns the buffer of an array with aval `out`. Inputs are
  // non-null arrays on this backend's device; their avals already passed the rule.
  virtual std::shared_ptr<Buffer> eval(Prim p, const Params& params,
                                       std::span<const Array> inputs,
                                       const Aval& out) = 0;
  // eval for one step of a compiled program (Executable): `keep` is the step's
  // own cache, alive as long as the program, where a backend may keep what the
  // step resolves to on its first call (its kernels, the launches' dispatch) so
  // that later calls skip that work. The step's avals and params never change,
  // so nothing kept there depends on anything else. The default ignores it.
  virtual std::shared_ptr<Buffer> eval_step(Prim p, const Params& params,
                                            std::span<const Array> inputs, const Aval& out,
                                            const KernelCache& /*keep*/) {
    return eval(p, params, inputs, out);
  }
  // Runs a fused elementwise group (dsl/fusion.hpp); returns one buffer per body
  // output. `into` is empty or has one entry per output: a non-null entry is the
  // buffer of one of `inputs` (same dtype and shape as that output, so read at
  // the same element index) that the caller gives up; the backend may write the
  // output there (in place) and return it, provided every element's inputs are
  // read before that element's outputs are written. The default evaluates the
  // body one equation at a time with eval() and ignores `into`.
  virtual std::vector<std::shared_ptr<Buffer>> eval_fused(
      const FusedKernel& kernel, std::span<const Array> inputs,
      std::span<const std::shared_ptr<Buffer>> into);
  // Whether eval_fused runs kUnfoldMatmul and kMatmulFold kernels (fusion.hpp)
  // itself; fusion forms them only for a backend that does.
  virtual bool fuses_windows() const { return false; }
  // Copies a host array onto this device (identity for the CPU backend).
  virtual Array from_host(const Array& host) = 0;
  // Bracket one call of a compiled program (Executable::run): every eval /
  // eval_fused of the call comes between them. A device backend may record the
  // whole call as one unit of work and hand it to the device at end_program
  // (Vulkan: one command buffer, one submit), without waiting for it. Scopes may
  // nest (the outermost end submits); end_program also runs when the call
  // throws. Use ProgramScope rather than calling these directly. The defaults do
  // nothing (the CPU runs each op as it is called).
  virtual void begin_program() {}
  virtual void end_program() {}
};

// begin_program on construction; end_program in end(), or in the destructor when
// the scope is left by an exception (an error from end_program is then dropped,
// so that the exception that ended the call is the one that propagates).
class ProgramScope {
 public:
  explicit ProgramScope(Backend& backend) : backend_(&backend) { backend.begin_program(); }
  ~ProgramScope() {
    if (backend_ == nullptr) return;
    try {
      backend_->end_program();
    } catch (...) {  // NOLINT(bugprone-empty-catch): unwinding already
    }
  }
  ProgramScope(const ProgramScope&) = delete;
  ProgramScope& operator=(const ProgramScope&) = delete;
  // Ends the scope; errors from the backend (a failed submit) propagate.
  void end() {
    if (Backend* b = std::exchange(backend_, nullptr)) b->end_program();
  }

 private:
  Backend* backend_;
};

namespace detail {
// A control-flow primitive (family kControl) reached a backend's eval: they
// are run by dsl/control.cpp, never by a backend (an internal Error).
[[noreturn]] void control_reached_backend(Prim p);
}  // namespace detail

// The backend that runs `d`. Throws DeviceError for an unavailable device, or
// one of a kind no backend in this build registered.
Backend& backend_for(Device d);
// Registers the backend of one device kind (`get(index)` returns the backend of
// device `index`); each backend calls it from a static initialiser
// (backends/registry.cpp), so dsl/ links no backend. Returns the getter it
// replaces (null if none).
using BackendGetter = Backend& (*)(int index);
BackendGetter register_backend(Device::Kind kind, BackendGetter get);

}  // namespace kiln
