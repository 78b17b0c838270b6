// libFuzzer target: kiln's small text parsers outside the checkpoint format:
// device names ("cpu", "vulkan:2"; KILN_DEVICE). A name that parses must
// print back to a name that parses to the same device.
#include <string>

#include "fuzz.hpp"
#include "kiln/runtime/device.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
  using namespace kiln;
  const std::string text(reinterpret_cast<const char *>(data), size);
  return fuzz::run([&] {
    const Device d = parse_device(text);
    fuzz::require(parse_device(d.to_string()) == d, "to_string/parse round trip");
  });
}
