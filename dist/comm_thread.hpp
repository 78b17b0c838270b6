// CommThread: the one thread that runs a group's Gloo collectives, in the
// order they were submitted. Internal to libkiln_dist. The caller stages the
// next bucket while this thread reduces the previous one; Gloo sees one
// collective at a time, as every rank submits them in the same order.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

namespace kiln::dist::detail {

class CommThread {
 public:
  CommThread();
  // Runs what is queued, then joins.
  ~CommThread();
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  // The future holds the job's exception, if it throws.
  std::future<void> submit(std::function<void()> job);

 private:
  void loop();
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::packaged_task<void()>> queue_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace kiln::dist::detail
