// The interface a device backend implements for eager execution. dsl/ declares it,
// backends/ implement it, and backends/registry.cpp maps a Device to its backend.
#pragma once

#include <memory>
#include <span>

#include "kiln/dsl/primitive.hpp"

namespace kiln {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  // Runs one primitive; returns the buffer of an array with aval `out`. Inputs are
  // non-null arrays on this backend's device; their avals already passed the rule.
  virtual std::shared_ptr<Buffer> eval(Prim p, const Params& params,
                                       std::span<const Array> inputs,
                                       const Aval& out) = 0;
  // Copies a host array onto this device (identity for the CPU backend).
  virtual Array from_host(const Array& host) = 0;
};

// Defined in backends/registry.cpp. Throws DeviceError for an unavailable device.
Backend& backend_for(Device d);

}  // namespace kiln
