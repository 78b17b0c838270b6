// launch_local: runs a program as the ranks of one group on this machine, each
// a separate process (posix_spawn, not fork: the parent may hold threads and
// devices), with KILN_RANK, KILN_WORLD_SIZE and a fresh rendezvous directory
// (KILN_DIST_STORE) in its environment, so the program only calls
// dist::init(). For tests, examples and benchmarks; a job across machines
// starts its ranks with its own launcher and the same variables.
//
//   auto r = dist::launch_local(3, {"./train", "--epochs", "2"});
//   if (!r.ok()) std::cerr << r.summary();
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace kiln::dist {

struct LaunchOptions {
  // Extra "NAME=value" entries for every rank (after the inherited ones).
  std::vector<std::string> env;
  // Every rank still running after this long is killed (SIGKILL).
  std::chrono::milliseconds deadline{600'000};
  // Once a rank has failed (a non-zero exit or a signal), the ranks still
  // running this much later are killed (as torchrun does); unset: they run to
  // the deadline. The others see the failure as a DistError and exit on their
  // own unless they are stuck.
  std::optional<std::chrono::milliseconds> kill_after_failure;
  // KILN_DIST_TIMEOUT for the ranks; unset: whatever the environment says.
  std::optional<std::chrono::milliseconds> timeout;
  // The ranks to start (default: all). Starting fewer than the world size is
  // how a test sees a rank that never joins.
  std::vector<int> ranks;
  // Rendezvous through a TCP store rank 0 serves at this "host:port"
  // (KILN_DIST_ADDR) instead of a fresh directory.
  std::string store_address;
  // Collect each rank's stdout and stderr into RankResult::output instead of
  // sharing the launcher's.
  bool capture_output = true;
};

struct RankResult {
  int rank = 0;
  int exit_code = -1;               // when the process exited
  int signal = 0;                   // when a signal ended it (the launcher's SIGKILL too)
  bool killed_by_launcher = false;  // at the deadline or after another rank failed
  double seconds = 0;               // from the launch to its end
  std::string output;
};

struct LaunchResult {
  std::vector<RankResult> ranks;  // in the order started
  bool ok() const;                // every rank exited with 0
  // One line per rank ("rank 1: exit 3 after 2.1 s"), then each captured output.
  std::string summary() const;
};

// argv[0] is found like execvp does. DistError when a process cannot start.
LaunchResult launch_local(int world_size, const std::vector<std::string>& argv,
                          const LaunchOptions& options = {});

}  // namespace kiln::dist
