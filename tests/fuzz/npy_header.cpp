// libFuzzer target: the .npy header parser (runtime/npy.cpp) on arbitrary
// bytes, as read_array feeds it: the prelude gives the length, then the
// whole header is parsed. Accepted headers must describe a valid shape and
// survive a round trip through make_header.
#include <string_view>

#include "fuzz.hpp"
#include "kiln/runtime/npy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
  using namespace kiln;
  const std::string_view bytes(reinterpret_cast<const char *>(data), size);
  return fuzz::run([&] {
    const std::size_t total =
        detail::npy::header_size(bytes.substr(0, detail::npy::kPreludeBytes), "fuzz");
    if (total > bytes.size()) return;
    const detail::npy::Header h = detail::npy::parse_header(bytes.substr(0, total), "fuzz");
    fuzz::require(shape_size(h.shape, size_of(h.dtype)).ok(), "accepted an invalid shape");
    const std::string again = detail::npy::make_header(h.dtype, h.shape);
    const detail::npy::Header h2 = detail::npy::parse_header(again, "fuzz");
    fuzz::require(h2.dtype == h.dtype && h2.shape == h.shape, "make_header round trip");
  });
}
