#include "progress.hpp"

#include <unistd.h>

#include <cstdio>
#include <iomanip>
#include <iostream>
#include <sstream>

namespace fmnist {
namespace {

double seconds_between(std::chrono::steady_clock::time_point a,
                       std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

std::string format_duration(double seconds) {
  const auto s = static_cast<long long>(seconds + 0.5);
  std::ostringstream os;
  if (s >= 3600) os << s / 3600 << ":" << std::setw(2) << std::setfill('0') << (s / 60) % 60;
  else os << s / 60;
  os << ":" << std::setw(2) << std::setfill('0') << s % 60;
  return os.str();
}

Progress::Progress(std::ostream& out, std::string label, std::int64_t total_steps)
    : out_(out),
      label_(std::move(label)),
      total_(total_steps),
      tty_(&out == &std::cout && isatty(STDOUT_FILENO) == 1),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

void Progress::update(std::int64_t done, double running_loss) {
  const auto now = std::chrono::steady_clock::now();
  if (tty_) {
    if (seconds_between(last_draw_, now) < 0.1 && done < total_) return;
    last_draw_ = now;
    draw(done, running_loss, false);
  } else if (total_ > 0 && done * 4 >= (quarters_printed_ + 1) * total_ && done < total_) {
    while (done * 4 >= (quarters_printed_ + 1) * total_) ++quarters_printed_;
    draw(done, running_loss, false);
  }
}

double Progress::finish(double running_loss) {
  draw(total_, running_loss, true);
  return seconds_between(start_, std::chrono::steady_clock::now());
}

void Progress::draw(std::int64_t done, double running_loss, bool final) {
  const double elapsed = seconds_between(start_, std::chrono::steady_clock::now());
  const double rate = elapsed > 0 ? static_cast<double>(done) / elapsed : 0.0;
  const double eta = rate > 0 ? static_cast<double>(total_ - done) / rate : 0.0;
  std::ostringstream line;
  line << label_ << " ";
  if (tty_) {
    constexpr int kWidth = 30;
    const int filled = total_ > 0 ? static_cast<int>(kWidth * done / total_) : kWidth;
    line << "[" << std::string(filled, '#') << std::string(kWidth - filled, '.') << "] ";
  }
  line << done << "/" << total_ << "  " << std::fixed << std::setprecision(1) << rate
       << " step/s  " << (final ? "took " + format_duration(elapsed)
                                : "ETA " + format_duration(eta))
       << "  loss " << std::setprecision(4) << running_loss;
  if (tty_) {
    out_ << "\r" << line.str() << "\033[K" << (final ? "\n" : "") << std::flush;
  } else {
    out_ << line.str() << "\n" << std::flush;
  }
}

}  // namespace fmnist
