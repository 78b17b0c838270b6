// The worker pool of thread_pool.hpp. A job is claimed task by task from one
// atomic word (job generation << 32 | next task), so a worker that wakes late
// can never run a task of a job other than the one it woke for; the caller runs
// tasks too and waits on a condition variable until every task has finished.
#include "kiln/runtime/thread_pool.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kiln/runtime/env.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln {
namespace {

int default_threads() {
  if (const auto n = detail::env::count("KILN_NUM_THREADS")) return static_cast<int>(*n);
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

using Task = absl::FunctionRef<void(std::size_t)>;

thread_local bool in_worker = false;

class Pool {
 public:
  static Pool& get() {
    static Pool* pool = new Pool();  // never destroyed: no join in static destructors
    return *pool;
  }

  int size() {
    const std::lock_guard<std::mutex> lock(mu_);
    if (size_ == 0) size_ = default_threads();
    return size_;
  }

  void resize(int n) {
    const std::lock_guard<std::mutex> busy(busy_);
    stop_workers();
    const std::lock_guard<std::mutex> lock(mu_);
    size_ = n;
  }

  void run(std::size_t tasks, Task fn) {
    if (tasks == 0) return;
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    // Serial: one task, one thread, a nested or concurrent call, or a forked child
    // (which has none of the parent's workers).
    if (tasks == 1 || !busy.owns_lock() || in_worker || size() <= 1 || ::getpid() != pid_) {
      if (busy.owns_lock()) busy.unlock();
      return run_serial(tasks, fn);
    }
    start_workers();
    std::uint32_t gen = 0;
    {
      const std::lock_guard<std::mutex> lock(mu_);
      job_ = &fn;
      tasks_ = tasks;
      error_ = nullptr;
      finished_.store(0);
      gen = ++generation_;
      next_.store(std::uint64_t{gen} << 32);
      published_.store(gen, std::memory_order_release);
    }
    wake_.notify_all();
    work(gen, &fn, tasks);
    spin_until([&] { return finished_.load(std::memory_order_acquire) == tasks; });
    std::exception_ptr error;
    {
      std::unique_lock<std::mutex> lock(mu_);
      done_.wait(lock, [&] { return finished_.load() == tasks; });
      error = std::exchange(error_, nullptr);
      job_ = nullptr;
    }
    if (error) std::rethrow_exception(error);
  }

 private:
  Pool() : pid_(::getpid()) {}

  static void run_serial(std::size_t tasks, Task fn) {
    std::exception_ptr error;
    for (std::size_t i = 0; i < tasks; ++i) {
      try {
        fn(i);
      } catch (...) {
        if (!error) error = std::current_exception();
      }
    }
    if (error) std::rethrow_exception(error);
  }

  // Claims and runs tasks of job `gen` until none is left.
  void work(std::uint32_t gen, const Task* job, std::size_t tasks) {
    for (;;) {
      std::uint64_t cur = next_.load();
      do {
        if ((cur >> 32) != gen || (cur & 0xffffffffu) >= tasks) return;
      } while (!next_.compare_exchange_weak(cur, cur + 1));
      try {
        (*job)(static_cast<std::size_t>(cur & 0xffffffffu));
      } catch (...) {
        const std::lock_guard<std::mutex> lock(mu_);
        if (!error_) error_ = std::current_exception();
      }
      if (finished_.fetch_add(1) + 1 == tasks) {
        const std::lock_guard<std::mutex> lock(mu_);
        done_.notify_all();
      }
    }
  }

  // Polls `ready` for up to kSpin before the caller sleeps on a condition
  // variable. Waking a sleeping thread costs tens of microseconds on a VM
  // (futex wake, then the scheduler), as long as a GEMM task of the MLP step:
  // without the spin the caller had claimed every task before a worker woke,
  // and 2 threads ran the step 7% faster than 1. The spin is bounded, unlike
  // OpenMP's default wait: an idle pool still sleeps after kSpin and costs
  // nothing.
  template <class Ready>
  static void spin_until(Ready ready) {
    constexpr auto kSpin = std::chrono::microseconds(100);
    const auto start = std::chrono::steady_clock::now();
    for (unsigned i = 1;; ++i) {
      if (ready()) return;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
      if (i % 64 == 0 && std::chrono::steady_clock::now() - start > kSpin) return;
    }
  }

  // `seen`: the last job generation when the worker was started.
  void worker_loop(std::uint32_t seen) {
    in_worker = true;
    for (;;) {
      spin_until([&] { return published_.load(std::memory_order_acquire) != seen; });
      const Task* job = nullptr;
      std::size_t tasks = 0;
      std::uint32_t gen = 0;
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = gen = generation_;
        job = job_;
        tasks = tasks_;
      }
      if (job != nullptr) work(gen, job, tasks);
    }
  }

  // Under busy_.
  void start_workers() {
    const int want = size() - 1;
    if (static_cast<int>(workers_.size()) == want) return;
    stop_workers();
    std::uint32_t gen = 0;
    {
      const std::lock_guard<std::mutex> lock(mu_);
      gen = generation_;
    }
    for (int i = 0; i < want; ++i) workers_.emplace_back([this, gen] { worker_loop(gen); });
  }

  void stop_workers() {
    {
      const std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
    workers_.clear();
    const std::lock_guard<std::mutex> lock(mu_);
    stop_ = false;
  }

  const pid_t pid_;
  std::mutex busy_;  // held by the caller whose job the workers run
  std::mutex mu_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  int size_ = 0;  // threads, the caller included; 0: not read yet
  bool stop_ = false;
  const Task* job_ = nullptr;
  std::size_t tasks_ = 0;
  std::uint32_t generation_ = 0;
  std::atomic<std::uint32_t> published_{0};  // generation_, for spinning workers
  std::atomic<std::uint64_t> next_{0};  // generation << 32 | next task
  std::atomic<std::size_t> finished_{0};
  std::exception_ptr error_;
};

}  // namespace

int num_threads() { return Pool::get().size(); }

void set_num_threads(int n) {
  if (n < 1) throw ValueError(detail::str_cat("[set_num_threads] expected n >= 1, got ", n));
  Pool::get().resize(n);
}

void parallel_for(std::size_t tasks, absl::FunctionRef<void(std::size_t)> fn) {
  Pool::get().run(tasks, fn);
}

}  // namespace kiln
