// libFuzzer target: the .npy header parser (runtime/npy.cpp) on arbitrary
// bytes, as read_array feeds it: the prelude gives the length, then the
// whole header is parsed, as an array's header and as a manifest's (a 1-d
// |u1 array). Accepted headers must describe a valid shape and survive a
// round trip through make_header / make_bytes_header.
#include <string_view>

#include "fuzz.hpp"
#include "kiln/runtime/npy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
  using namespace kiln;
  const std::string_view bytes(reinterpret_cast<const char *>(data), size);
  // The whole header, or "" when the input is shorter than its prelude says.
  auto header = [&] {
    const std::size_t total =
        detail::npy::header_size(bytes.substr(0, detail::npy::kPreludeBytes), "fuzz");
    return total > bytes.size() ? std::string_view() : bytes.substr(0, total);
  };
  fuzz::run([&] {
    if (header().empty()) return;
    const detail::npy::Header h = detail::npy::parse_header(header(), "fuzz");
    fuzz::require(shape_size(h.shape, size_of(h.dtype)).ok(), "accepted an invalid shape");
    const std::string again = detail::npy::make_header(h.dtype, h.shape);
    const detail::npy::Header h2 = detail::npy::parse_header(again, "fuzz");
    fuzz::require(h2.dtype == h.dtype && h2.shape == h.shape, "make_header round trip");
  });
  // The same bytes as a checkpoint manifest's header (a 1-d |u1 array).
  return fuzz::run([&] {
    if (header().empty()) return;
    const std::uint64_t n = detail::npy::parse_bytes_header(header(), "fuzz");
    const std::string again = detail::npy::make_bytes_header(n);
    fuzz::require(detail::npy::parse_bytes_header(again, "fuzz") == n,
                  "make_bytes_header round trip");
  });
}
