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
#include <span>

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

// A property a target checks on input the reader accepted.
inline void require(bool ok, const char *what) {
  if (!ok) {
    std::fprintf(stderr, "kiln fuzz: property failed: %s\n", what);
    std::abort();
  }
}

}  // namespace kiln::fuzz
