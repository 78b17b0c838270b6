// Helpers of the fusion suites (test_fusion.cpp, test_fusion_jit_ops.cpp,
// test_fusion_windows.cpp): a device array's bytes, a program traced and
// optimized the way filter_jit makes one, and every fused step of a program
// checked against its equations evaluated one at a time.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <kiln/dsl/backend.hpp>
#include <kiln/dsl/fusion.hpp>
#include <kiln/dsl/program.hpp>
#include <kiln/dsl/trace.hpp>
#include <kiln/kiln.hpp>
#include <limits>
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

// ulps between two floats of the same sign class (NaN == NaN).
template <class F, class I>
inline std::int64_t ulps(F a, F b) {
  if (std::isnan(a) && std::isnan(b)) return 0;
  I ia, ib;
  std::memcpy(&ia, &a, sizeof(F));
  std::memcpy(&ib, &b, sizeof(F));
  if ((ia < 0) != (ib < 0)) return a == b ? 0 : std::numeric_limits<std::int64_t>::max();
  return ia > ib ? static_cast<std::int64_t>(ia - ib) : static_cast<std::int64_t>(ib - ia);
}

// `got` equals `want` bit for bit, or within `max_ulps` for f32/f64.
inline void check_equal(const Array& got, const Array& want, std::int64_t max_ulps = 0) {
  REQUIRE(got.dtype() == want.dtype());
  REQUIRE(got.shape() == want.shape());
  const auto g = bytes_of(got), w = bytes_of(want);
  if (g == w) return;
  // Otherwise element by element: NaN equals NaN whatever its sign and payload
  // (which operand's NaN an add returns is the compiler's choice: it may swap
  // the operands of a commutative instruction), all else exactly or within
  // max_ulps.
  std::int64_t worst = 0;
  std::size_t at = 0;
  const std::size_t n = static_cast<std::size_t>(got.size());
  for (std::size_t i = 0; i < n; ++i) {
    std::int64_t d = 0;
    if (got.dtype() == f32) {
      float a, b;
      std::memcpy(&a, &g[i * 4], 4);
      std::memcpy(&b, &w[i * 4], 4);
      d = ulps<float, std::int32_t>(a, b);
    } else if (got.dtype() == f64) {
      double a, b;
      std::memcpy(&a, &g[i * 8], 8);
      std::memcpy(&b, &w[i * 8], 8);
      d = ulps<double, std::int64_t>(a, b);
    } else {
      d = std::memcmp(&g[i * size_of(got.dtype())], &w[i * size_of(got.dtype())],
                      size_of(got.dtype())) == 0
              ? 0
              : std::numeric_limits<std::int64_t>::max();
    }
    if (d > worst) {
      worst = d;
      at = i;
    }
  }
  CAPTURE(at);
  CHECK(worst <= max_ulps);
}

// Runs every fused step of fuse(p) through the device's eval_fused on the values
// eval_all computes one equation at a time, and compares each output with the
// unfused value. Returns the steps.
inline std::vector<Step> check_fused(const Program& p, const std::vector<Array>& inputs,
                                     std::int64_t max_ulps = 0) {
  const std::vector<Array> env = eval_all(p, inputs);
  std::vector<Step> steps = fuse(p);
  Backend& backend = backend_for(default_device());
  for (const Step& s : steps) {
    if (s.kernel == nullptr) continue;
    std::vector<Array> args;
    for (ValueId v : s.inputs) args.push_back(env[v]);
    const auto bufs = backend.eval_fused(*s.kernel, args, {});
    REQUIRE(bufs.size() == s.outputs.size());
    for (std::size_t o = 0; o < bufs.size(); ++o) {
      const Aval& a = p.avals[s.outputs[o]];
      CAPTURE(name(s.kernel->kind));
      CAPTURE(o);
      check_equal(Array(a.dtype, a.shape, bufs[o]), env[s.outputs[o]], max_ulps);
    }
  }
  return steps;
}

}  // namespace kiln::fusion_test
