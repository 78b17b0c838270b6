// A per-epoch progress bar: steps done, step rate, ETA and running loss, redrawn
// in place at most 10 times a second on a terminal; on a pipe or file it prints
// plain lines at each quarter of the epoch instead.
#pragma once

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <string>

namespace fmnist {

class Progress {
 public:
  Progress(std::ostream& out, std::string label, std::int64_t total_steps);
  // After step `done` (1-based) with the running mean loss so far.
  void update(std::int64_t done, double running_loss);
  // Ends the bar's line; returns the epoch's seconds since construction.
  double finish(double running_loss);

 private:
  void draw(std::int64_t done, double running_loss, bool final);

  std::ostream& out_;
  std::string label_;
  std::int64_t total_;
  bool tty_;
  int quarters_printed_ = 0;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

// "1:05" / "12:03:09".
std::string format_duration(double seconds);

}  // namespace fmnist
