// libFuzzer target: a whole safetensors file (runtime/weights.cpp's reader:
// the header length, the JSON header, every tensor's dtype, shape and byte
// range) read from a file in /dev/shm (or $TMPDIR), as read_safetensors reads
// from a path. What it accepts must be consistent: each array's buffer holds
// exactly its shape's bytes. The seed is the file the
// safetensors library wrote (tests/golden/weights.safetensors).
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "fuzz.hpp"
#include "kiln/runtime/weights.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
  static const std::filesystem::path path = kiln::fuzz::scratch_file("weights.safetensors");
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char *>(data), static_cast<std::streamsize>(size));
  }
  return kiln::fuzz::run([&] {
    const kiln::NamedArrays arrays =
        kiln::read_safetensors(path, {.skip_unsupported_dtypes = true});
    for (const kiln::NamedArray &n : arrays) {
      kiln::fuzz::require(n.array.buffer()->nbytes() == n.array.nbytes(),
                          "an array's buffer holds its shape's bytes");
    }
  });
}
