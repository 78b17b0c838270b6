// kiln's own f32 GEMM (backends/cpu/gemm_kernels.cpp), at every SIMD level this
// CPU has kernels for: values against a double-precision reference over shapes
// enumerated around the kernel's tile and block sizes, and the bit-level
// promises of gemm.hpp: the same bits for every thread count, for an element
// wherever it sits (a sub-block of C equals the product of the sub-operands),
// and on every level (one FMA chain per element, the same k blocks).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <kiln/kiln.hpp>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "kiln/backends/cpu/gemm.hpp"

using namespace kiln;

namespace {

struct Level {
  const char* name;
  cpu::Sgemm sgemm;
};

// The levels whose kernels this CPU can run (x86-64 builds have v3 and v4).
std::vector<Level> levels() {
  std::vector<Level> out;
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("x86-64-v3")) out.push_back({"x86-64-v3", &cpu::isa_x86_v3::sgemm});
  if (__builtin_cpu_supports("x86-64-v4")) out.push_back({"x86-64-v4", &cpu::isa_x86_v4::sgemm});
#endif
  return out;
}

std::vector<float> uniform(std::int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

// op(A)[i, p] and op(B)[p, j] of row-major storage (A^T stored k x m, B^T n x k).
float at(const std::vector<float>& a, bool t, std::int64_t rows, std::int64_t cols,
         std::int64_t i, std::int64_t j) {
  return t ? a[static_cast<std::size_t>(j * rows + i)] : a[static_cast<std::size_t>(i * cols + j)];
}

struct Case {
  std::int64_t m, n, k;
  bool ta, tb;
  std::string str() const {
    return std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) +
           (ta ? " A^T" : "") + (tb ? " B^T" : "");
  }
};

std::vector<float> run(const Level& l, const Case& c, const std::vector<float>& a,
                       const std::vector<float>& b) {
  std::vector<float> out(static_cast<std::size_t>(c.m * c.n), std::nanf(""));
  l.sgemm(c.m, c.n, c.k, a.data(), b.data(), out.data(), c.ta, c.tb);
  return out;
}

bool same_bits(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

// Sizes on both sides of the kernels' tile rows (6), panel widths (16, 32) and
// k block (256), plus the degenerate ones.
const std::int64_t kRows[] = {1, 5, 6, 7, 13, 64};
const std::int64_t kCols[] = {1, 10, 16, 17, 31, 32, 33, 100};
const std::int64_t kDepth[] = {0, 1, 10, 255, 256, 257, 600};

}  // namespace

TEST_CASE("kiln's GEMM matches a double-precision product on every level, shape and transpose") {
  const auto ls = levels();
  if (ls.empty()) return;  // not x86-64 with AVX2: OpenBLAS runs every f32 GEMM
  int checked = 0;
  for (const Level& l : ls) {
    for (std::int64_t m : kRows) {
      for (std::int64_t n : kCols) {
        for (std::int64_t k : kDepth) {
          for (int t = 0; t < 4; ++t) {
            const Case c{m, n, k, (t & 1) != 0, (t & 2) != 0};
            const auto a = uniform(m * k, 1);
            const auto b = uniform(k * n, 2);
            const auto got = run(l, c, a, b);
            for (std::int64_t i = 0; i < m; ++i) {
              for (std::int64_t j = 0; j < n; ++j) {
                double ref = 0, mag = 0;
                for (std::int64_t p = 0; p < k; ++p) {
                  const double x = static_cast<double>(at(a, c.ta, m, k, i, p)) *
                                   static_cast<double>(at(b, c.tb, k, n, p, j));
                  ref += x;
                  mag += std::fabs(x);
                }
                const double v = got[static_cast<std::size_t>(i * n + j)];
                if (!(std::fabs(v - ref) <= 1e-6 * mag + 1e-30)) {
                  FAIL_CHECK(l.name, " ", c.str(), " C[", i, ",", j, "] = ", v, ", expected ",
                             ref);
                  i = m;
                  break;
                }
              }
            }
            ++checked;
          }
        }
      }
    }
  }
  CHECK(checked == static_cast<int>(ls.size() * 6 * 8 * 7 * 4));
}

TEST_CASE("kiln's GEMM gives the same bits for every thread count, position and level") {
  const auto ls = levels();
  if (ls.empty()) return;
  // Big enough to split over threads (> 2^20 multiply-adds), with partial tiles,
  // several k blocks, and the C^T path (n narrower than a panel).
  const Case cases[] = {{203, 301, 517, false, false}, {97, 9, 1300, false, true},
                        {7, 1000, 300, true, false}, {130, 130, 260, true, true}};
  const int saved = num_threads();
  for (const Case& c : cases) {
    CAPTURE(c.str());
    const auto a = uniform(c.m * c.k, 3);
    const auto b = uniform(c.k * c.n, 4);
    set_num_threads(1);
    const auto one = run(ls.front(), c, a, b);
    for (const Level& l : ls) {
      CAPTURE(l.name);
      for (int threads : {1, 2, 3, 7}) {
        set_num_threads(threads);
        CHECK(same_bits(run(l, c, a, b), one));
      }
    }
    // A block of rows [i0, i1) and columns [j0, j1) computed on its own.
    const std::int64_t i0 = c.m / 3, i1 = c.m - 1, j0 = c.n / 4, j1 = c.n - c.n / 5;
    const std::int64_t sm = i1 - i0, sn = j1 - j0;
    std::vector<float> sa(static_cast<std::size_t>(sm * c.k)), sb(static_cast<std::size_t>(c.k * sn));
    for (std::int64_t i = 0; i < sm; ++i) {
      for (std::int64_t p = 0; p < c.k; ++p) {
        (c.ta ? sa[static_cast<std::size_t>(p * sm + i)] : sa[static_cast<std::size_t>(i * c.k + p)]) =
            at(a, c.ta, c.m, c.k, i0 + i, p);
      }
    }
    for (std::int64_t p = 0; p < c.k; ++p) {
      for (std::int64_t j = 0; j < sn; ++j) {
        (c.tb ? sb[static_cast<std::size_t>(j * c.k + p)] : sb[static_cast<std::size_t>(p * sn + j)]) =
            at(b, c.tb, c.k, c.n, p, j0 + j);
      }
    }
    for (const Level& l : ls) {
      CAPTURE(l.name);
      const auto sub = run(l, Case{sm, sn, c.k, c.ta, c.tb}, sa, sb);
      int differ = 0;
      for (std::int64_t i = 0; i < sm; ++i) {
        differ += std::memcmp(&sub[static_cast<std::size_t>(i * sn)],
                              &one[static_cast<std::size_t>((i0 + i) * c.n + j0)],
                              static_cast<std::size_t>(sn) * sizeof(float)) != 0;
      }
      CHECK(differ == 0);
    }
  }
  set_num_threads(saved);
}

TEST_CASE("kiln's GEMM: inf and NaN stay in their rows and columns; padding adds none") {
  for (const Level& l : levels()) {
    CAPTURE(l.name);
    const Case c{13, 10, 300, false, false};  // partial tiles and the C^T path
    auto a = uniform(c.m * c.k, 5);
    auto b = uniform(c.k * c.n, 6);
    a[static_cast<std::size_t>(2 * c.k + 7)] = std::numeric_limits<float>::infinity();
    b[static_cast<std::size_t>(9 * c.n + 4)] = std::nanf("");
    const auto got = run(l, c, a, b);
    for (std::int64_t i = 0; i < c.m; ++i) {
      for (std::int64_t j = 0; j < c.n; ++j) {
        const float v = got[static_cast<std::size_t>(i * c.n + j)];
        CAPTURE(i);
        CAPTURE(j);
        if (j == 4) {
          CHECK(std::isnan(v));
        } else if (i == 2) {
          CHECK(std::isinf(v));
        } else {
          CHECK(std::isfinite(v));
        }
      }
    }
  }
}

TEST_CASE("the CPU device's matmul runs kiln's GEMM where the level has it, and says so") {
  const std::string driver = devices().front().driver;
  CHECK(driver.find("; f32 GEMM ") != std::string::npos);
  if (cpu::kiln_sgemm() != nullptr && std::getenv("KILN_GEMM") == nullptr) {
    CHECK(cpu::gemm_lib() == cpu::GemmLib::kKiln);
    CHECK(driver.find("f32 GEMM kiln ") != std::string::npos);
    // Through the DSL: the same bits as the kernel called directly.
    const std::int64_t m = 37, n = 45, k = 290;
    const auto a = uniform(m * k, 7);
    const auto b = uniform(n * k, 8);
    const Array got = matmul(Array::from_data(std::span<const float>(a), Shape{m, k}),
                             transpose(Array::from_data(std::span<const float>(b), Shape{n, k})));
    std::vector<float> want(static_cast<std::size_t>(m * n));
    cpu::kiln_sgemm()(m, n, k, a.data(), b.data(), want.data(), false, true);
    CHECK(same_bits(got.to_vector<float>(), want));
  }
}
