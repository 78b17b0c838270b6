// Helpers of the fusion suites (test_fusion.cpp, test_fusion_jit_ops.cpp,
// test_fusion_windows.cpp): a device array's bytes, and a program traced and
// optimized the way filter_jit makes one.
#pragma once

#include <cstddef>
#include <kiln/dsl/program.hpp>
#include <kiln/dsl/trace.hpp>
#include <kiln/kiln.hpp>
#include <string>
#include <vector>

namespace kiln::fusion_test {

inline std::vector<std::byte> bytes_of(const Array& a) {
  std::vector<std::byte> out(a.nbytes());
  if (!out.empty()) a.buffer()->read(out.data());
  return out;
}

// Traces `f` on inputs with `avals` (named x0, x1, ...) on the default device
// and optimizes the program the way filter_jit does.
template <class F>
Program trace(F f, const std::vector<Aval>& avals) {
  Trace t;
  std::vector<Array> xs;
  for (std::size_t i = 0; i < avals.size(); ++i) {
    xs.push_back(t.input(avals[i], default_device(), "x" + std::to_string(i)));
  }
  Program p = t.finish(f(xs));
  optimize(p);
  return p;
}

}  // namespace kiln::fusion_test
