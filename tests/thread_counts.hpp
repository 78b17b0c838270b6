// Helpers of the thread-count suites (test_threads_reduce.cpp,
// test_threads_layout.cpp): run a kernel at 1, 2, 3 and 7 pool threads and
// compare the results bit for bit.
#pragma once

#include <doctest/doctest.h>

#include <bit>
#include <cstdint>
#include <functional>
#include <kiln/kiln.hpp>
#include <string>
#include <type_traits>
#include <vector>

namespace kiln::threads_test {

// The pool is the CPU backend's: these suites skip other devices.
inline constexpr int kThreadCounts[] = {1, 2, 3, 7};

inline bool on_cpu() { return default_device().kind == Device::Kind::kCpu; }

// The array's elements as bit patterns (NaN payloads and -0 included).
inline std::vector<std::uint64_t> bits(const Array& a) {
  std::vector<std::uint64_t> out;
  const auto put = [&](const auto& v) {
    for (const auto x : v) {
      if constexpr (std::is_same_v<std::remove_cvref_t<decltype(x)>, float>) {
        out.push_back(std::bit_cast<std::uint32_t>(x));
      } else if constexpr (std::is_same_v<std::remove_cvref_t<decltype(x)>,
                                          double>) {
        out.push_back(std::bit_cast<std::uint64_t>(x));
      } else {
        out.push_back(static_cast<std::uint64_t>(x));
      }
    }
  };
  if (a.dtype() == f32)
    put(a.to_vector<float>());
  else if (a.dtype() == f64)
    put(a.to_vector<double>());
  else if (a.dtype() == i32)
    put(a.to_vector<std::int32_t>());
  else if (a.dtype() == u32)
    put(a.to_vector<std::uint32_t>());
  else
    FAIL("no bits() for ", name(a.dtype()));
  return out;
}

// f() at each of kThreadCounts; checks that every run gives the one-thread
// bits (and shape), and returns that result.
inline Array same_at_every_thread_count(const std::string& label,
                                        const std::function<Array()>& f) {
  const int before = num_threads();
  std::vector<Array> got;
  for (const int t : kThreadCounts) {
    set_num_threads(t);
    got.push_back(f());
  }
  set_num_threads(before);
  INFO(label);
  for (std::size_t i = 1; i < got.size(); ++i) {
    INFO(kThreadCounts[i], " threads");
    CHECK(got[i].shape() == got[0].shape());
    CHECK(got[i].dtype() == got[0].dtype());
    CHECK(bits(got[i]) == bits(got[0]));
  }
  return got[0];
}

}  // namespace kiln::threads_test
