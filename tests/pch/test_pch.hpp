// The precompiled header of the test executables with more than one source
// (tests/meson.build, `cpp_pch`): doctest and kiln.hpp are most of a test
// file's compile time at -O0, and each executable parses them once, not once
// per file. meson passes it with -include, so test sources keep their own
// #include lines and still compile without it (the header is never required).
#include <doctest/doctest.h>
#include <kiln/kiln.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>
