// Where a Vulkan device's time goes: GPU timestamps around every dispatch and
// copy kiln records, summed by kernel kind. For tuning and for reports such as
// bench/gpu_steps's; KILN_VK_PROFILE=1 turns it on for every Vulkan device and
// prints each device's table to stderr at exit (KILN_VK_PROFILE=<path> writes
// them as JSON instead).
//
//   kiln::vulkan::set_profiling(d, true);
//   ... steps ...
//   kiln::synchronize(d);
//   std::cerr << kiln::vulkan::profile_report(d);
//
// A command's time is its timestamp minus the previous one in its command
// buffer, so commands that overlap (no barrier between them) share the time as
// the queue finishes them. A device whose compute queue has no timestamps
// records nothing (profiling() stays false).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "kiln/runtime/device.hpp"

namespace kiln::vulkan {

// One kind of command: the start of its kernel's key ("matmul|f32",
// "map|fused", "reduce|sum", "sort.pass"), or "copy (upload)" / "copy (read)".
struct KernelTime {
  std::string kind;
  std::size_t dispatches = 0;
  double ms = 0.0;
};

// Command buffers begun after this call are timed (or not).
void set_profiling(Device device, bool on);
bool profiling(Device device);
// Device time per kind of the command buffers that finished, largest first
// (call synchronize first for everything recorded so far).
std::vector<KernelTime> profile(Device device);
void reset_profile(Device device);
// The profile as a table, or as one JSON object (`json`).
std::string profile_report(Device device, bool json = false);

}  // namespace kiln::vulkan
