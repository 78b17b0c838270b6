// The communication thread of a dist group (see comm_thread.hpp).
#include "kiln/dist/comm_thread.hpp"

#include <utility>

#include "kiln/dist/sigpipe.hpp"

namespace kiln::dist::detail {

CommThread::CommThread() : thread_([this] { loop(); }) {}

CommThread::~CommThread() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  ready_.notify_one();
  thread_.join();
}

std::future<void> CommThread::submit(std::function<void()> job) {
  std::packaged_task<void()> task(std::move(job));
  std::future<void> done = task.get_future();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(task));
  }
  ready_.notify_one();
  return done;
}

void CommThread::loop() {
  block_sigpipe();  // this thread writes to Gloo's sockets
  for (;;) {
    std::packaged_task<void()> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      ready_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and nothing left
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();  // exceptions go into the task's future
  }
}

}  // namespace kiln::dist::detail
