// The Vulkan backend: lowers each primitive to a kernel (kernels.hpp), allocates
// its output (memory.hpp) and records the dispatch (stream.hpp). Layout changes
// that keep the bytes (reshape, identity) share the input's buffer.
#pragma once

#include "kiln/dsl/backend.hpp"

namespace kiln::vk {

class Context;

class VulkanBackend final : public Backend {
 public:
  explicit VulkanBackend(Context& ctx) : ctx_(ctx) {}
  Device device() const override;
  std::shared_ptr<Buffer> eval(Prim p, const Params& params,
                               std::span<const Array> inputs,
                               const Aval& out) override;
  // eval, keeping each launch in the step's cache (no spec, key or pipeline
  // lookup on later calls) where the family's launches are fixed.
  std::shared_ptr<Buffer> eval_step(Prim p, const Params& params, std::span<const Array> inputs,
                                    const Aval& out, const KernelCache& keep) override;
  // One map kernel per fused elementwise group (kernel_fused.cpp).
  std::vector<std::shared_ptr<Buffer>> eval_fused(
      const FusedKernel& kernel, std::span<const Array> inputs,
      std::span<const std::shared_ptr<Buffer>> into) override;
  Array from_host(const Array& host) override;
  // One compiled-program call records into one command buffer, submitted at the
  // end without waiting (stream.hpp).
  void begin_program() override;
  void end_program() override;

 private:
  std::shared_ptr<Buffer> run(Prim p, const Params& params, std::span<const Array> inputs,
                              const Aval& out, const KernelCache* cache);
  Context& ctx_;
};

// The backend of vulkan:index (created on first use).
VulkanBackend& backend(int index);
// Drops the backend of a released device (vulkan::release_external_device).
void forget_backend(int index);

}  // namespace kiln::vk
