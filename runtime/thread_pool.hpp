// kiln's worker threads for large CPU kernels: one pool per process. Its size is
// set_num_threads() if called, else KILN_NUM_THREADS, else the number of CPUs
// this process may run on (its affinity mask). Between jobs a worker polls for
// up to 100 us, then sleeps on a condition variable, so an idle pool costs
// nothing and never competes with the application's threads or OpenBLAS's
// (whose kernels run between kiln's, not during them).
#pragma once

#include <absl/functional/function_ref.h>

#include <cstddef>

namespace kiln {

// Threads the CPU kernels may use, the calling one included (>= 1).
int num_threads();
// Sets it (n >= 1; 1 runs every kernel on the calling thread). Takes effect for
// the next kernel; safe to call while no kernel runs.
void set_num_threads(int n);

// Runs fn(0) ... fn(tasks - 1) on the pool and the calling thread, returning
// when all have run: kiln's kernels use it, and so may the application (a data
// loader's batch, between steps, on the same threads and with no
// oversubscription). The first exception a task throws is rethrown here (the
// other tasks still run). A call made while the pool is busy (from a task, or
// from another thread) runs its tasks on its own thread, in order.
void parallel_for(std::size_t tasks, absl::FunctionRef<void(std::size_t)> fn);
}  // namespace kiln
