// Splitting a CPU kernel's units of work over the thread pool
// (runtime/thread_pool.hpp) when the kernel is large, as the elementwise and
// fused kernels do. Callers make each unit's result independent of which task
// runs it and of how units are grouped into tasks, so a result has the same
// bits at every thread count. Internal to the CPU backend (reduce.cpp,
// layout.cpp, index.cpp).
#pragma once

#include <algorithm>
#include <cstddef>

#include "kiln/runtime/thread_pool.hpp"

namespace kiln::cpu {

// Elements of work per task. A kernel under two tasks' worth runs on the
// calling thread: small ops keep their latency.
inline constexpr std::size_t kTaskGrain = std::size_t{1} << 16;

// Calls f(lo, hi) over consecutive ranges that cover units [0, units), each
// unit being about `work` elements of work: once on the calling thread for a
// small kernel, else in tasks of about kTaskGrain elements on the pool.
template <class F>
void parallel_ranges(std::size_t units, std::size_t work, F&& f) {
  const std::size_t tasks = std::min(units, units * work / kTaskGrain);
  if (tasks < 2) {
    if (units > 0) f(std::size_t{0}, units);
    return;
  }
  parallel_for(tasks, [&](std::size_t t) {
    f(units * t / tasks, units * (t + 1) / tasks);
  });
}

// Column blocks of an (outer, n, inner) kernel in which each of the inner
// columns is computed on its own: `blocks` blocks of `width` columns (the
// last may be narrower), enough that outer * blocks units make every task of
// parallel_ranges, and at least kMinColumns wide: a narrow block steps
// through memory a few cache lines per row and page, which the hardware
// prefetcher and the TLB do badly (blocks of 64 and of 1024 columns made a
// 2048x2048 column sum 6x and 3x slower on one thread).
inline constexpr std::size_t kMinColumns = std::size_t{1} << 14;
struct ColumnBlocks {
  std::size_t blocks;
  std::size_t width;
};
inline ColumnBlocks column_blocks(std::size_t outer, std::size_t n,
                                  std::size_t inner) {
  const std::size_t tasks = outer * n * inner / kTaskGrain;
  std::size_t blocks = 1;
  if (tasks > outer) {
    blocks = std::min((tasks + outer - 1) / outer,
                      std::max<std::size_t>(1, inner / kMinColumns));
  }
  const std::size_t width = (inner + blocks - 1) / blocks;
  return {(inner + width - 1) / width, width};
}

}  // namespace kiln::cpu
