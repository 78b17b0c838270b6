// Shared by the libFuzzer targets in this folder (see meson.build here and
// scripts/fuzz). A target feeds bytes to one reader of untrusted input; a
// kiln::Error (CheckpointError, ShapeError, ...) is the expected answer to bad
// bytes and is swallowed by run(). Anything else is a finding: another
// exception escapes (std::terminate, which libFuzzer reports as a crash), and
// ASan/UBSan reports abort the run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <span>
#include <string>

#include <unistd.h>

#include "kiln/runtime/error.hpp"

namespace kiln::fuzz {

template <class Fn>
int run(Fn &&fn) {
  try {
    fn();
  } catch (const kiln::Error &) {
    // Bad input, reported the way kiln promises.
  }
  return 0;
}

// A file for readers that take a path (minizip, read_safetensors): in
// /dev/shm when there is one, else $TMPDIR; one per process and `name`.
inline std::filesystem::path scratch_file(const std::string &name) {
  std::filesystem::path dir = "/dev/shm";
  if (!std::filesystem::is_directory(dir)) dir = std::filesystem::temp_directory_path();
  return dir / ("kiln-fuzz-" + std::to_string(::getpid()) + "-" + name);
}

// A property a target checks on input the reader accepted.
inline void require(bool ok, const char *what) {
  if (!ok) {
    std::fprintf(stderr, "kiln fuzz: property failed: %s\n", what);
    std::abort();
  }
}

}  // namespace kiln::fuzz
