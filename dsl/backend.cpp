// The registry from a device kind to the backend that runs it. Backends fill it
// when libkiln loads (backends/registry.cpp); dsl/ calls through it and links
// none of them.
#include "kiln/dsl/backend.hpp"

#include <array>
#include <utility>

#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln {
namespace {
// Written by static initialisers, read afterwards: no lock.
std::array<BackendGetter, Device::kKinds>& getters() {
  static std::array<BackendGetter, Device::kKinds> all{};
  return all;
}
}  // namespace

BackendGetter register_backend(Device::Kind kind, BackendGetter get) {
  return std::exchange(getters()[static_cast<std::size_t>(kind)], get);
}

Backend& backend_for(Device d) {
  const BackendGetter get = getters()[static_cast<std::size_t>(d.kind)];
  if (get == nullptr) {
    throw DeviceError(detail::str_cat("[device] this build of kiln has no backend for ",
                                      d.to_string()));
  }
  return get(d.index);
}

}  // namespace kiln
