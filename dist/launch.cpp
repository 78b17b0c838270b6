// launch_local (see launch.hpp): posix_spawn of each rank, a deadline, and the
// rank's output captured through a file in the job's temporary directory.
#include "kiln/dist/launch.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "kiln/dist/error.hpp"
#include "kiln/runtime/strings.hpp"

extern char** environ;

namespace kiln::dist {

using kiln::detail::str_cat;
namespace {

using Clock = std::chrono::steady_clock;

bool overridden(const char* entry) {
  for (const char* name : {"KILN_RANK=", "KILN_WORLD_SIZE=", "KILN_DIST_STORE=", "KILN_DIST_ADDR=",
                           "KILN_DIST_RUN_ID="}) {
    if (absl::StartsWith(entry, name)) return true;
  }
  return false;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

bool LaunchResult::ok() const {
  for (const RankResult& r : ranks) {
    if (r.exit_code != 0) return false;
  }
  return !ranks.empty();
}

std::string LaunchResult::summary() const {
  std::string s;
  for (const RankResult& r : ranks) {
    s += str_cat("rank ", r.rank, ": ");
    if (r.signal != 0) {
      s += str_cat("killed by signal ", r.signal, r.killed_by_launcher ? " from the launcher" : "");
    } else {
      s += str_cat("exit ", r.exit_code);
    }
    s += absl::StrFormat(" after %.2f s\n", r.seconds);
  }
  for (const RankResult& r : ranks) {
    if (!r.output.empty()) s += str_cat("---- rank ", r.rank, " output\n", r.output);
  }
  return s;
}

LaunchResult launch_local(int world_size, const std::vector<std::string>& argv,
                          const LaunchOptions& options) {
  const std::string who = "[dist.launch_local] ";
  if (world_size < 1 || argv.empty()) {
    throw ValueError(who + "needs a world size of at least 1 and a program to run");
  }
  std::vector<int> ranks = options.ranks;
  if (ranks.empty()) {
    for (int r = 0; r < world_size; ++r) ranks.push_back(r);
  }
  for (int r : ranks) {
    if (r < 0 || r >= world_size) {
      throw ValueError(str_cat(who, "rank ", r, " is outside [0, ", world_size, ")"));
    }
  }

  const char* tmp = std::getenv("TMPDIR");
  std::string dir = str_cat(tmp && *tmp ? tmp : "/tmp", "/kiln-dist-XXXXXX");
  if (::mkdtemp(dir.data()) == nullptr) {
    throw DistError(str_cat(who, "mkdtemp ", dir, ": ", std::strerror(errno)));
  }
  const std::string store = dir + "/store";
  std::filesystem::create_directories(store);

  std::vector<std::string> common;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!overridden(*e)) common.emplace_back(*e);
  }
  common.push_back(str_cat("KILN_WORLD_SIZE=", world_size));
  common.push_back(options.store_address.empty() ? "KILN_DIST_STORE=" + store
                                                 : "KILN_DIST_ADDR=" + options.store_address);
  if (options.timeout) {
    common.push_back(absl::StrFormat("KILN_DIST_TIMEOUT=%.3f",
                                     static_cast<double>(options.timeout->count()) / 1000));
  }
  common.insert(common.end(), options.env.begin(), options.env.end());

  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  LaunchResult result;
  std::vector<pid_t> pids;
  const auto start = Clock::now();
  auto kill_started = [&] {
    for (pid_t p : pids) {
      ::kill(p, SIGKILL);
      ::waitpid(p, nullptr, 0);
    }
  };
  for (int r : ranks) {
    std::vector<std::string> env = common;
    env.push_back(str_cat("KILN_RANK=", r));
    std::vector<char*> envp;
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    const std::string log = str_cat(dir, "/rank", r, ".log");
    if (options.capture_output) {
      posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                       0644);
      posix_spawn_file_actions_adddup2(&actions, 1, 2);
    }
    pid_t pid = 0;
    const int rc = ::posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
      kill_started();
      std::filesystem::remove_all(dir);
      throw DistError(
          str_cat(who, "cannot start rank ", r, " (", argv[0], "): ", std::strerror(rc)));
    }
    pids.push_back(pid);
    RankResult rr;
    rr.rank = r;
    result.ranks.push_back(std::move(rr));
  }

  // Ranks still running at `kill_at` are killed: the deadline, or a grace
  // period after the first rank that failed.
  auto kill_at = start + options.deadline;
  std::size_t running = pids.size();
  std::vector<bool> done(pids.size(), false);
  while (running > 0) {
    const bool late = Clock::now() >= kill_at;
    for (std::size_t i = 0; i < pids.size(); ++i) {
      if (done[i]) continue;
      if (late) {
        ::kill(pids[i], SIGKILL);
        result.ranks[i].killed_by_launcher = true;
      }
      int status = 0;
      const pid_t w = ::waitpid(pids[i], &status, late ? 0 : WNOHANG);
      if (w != pids[i]) continue;
      RankResult& rr = result.ranks[i];
      rr.seconds = std::chrono::duration<double>(Clock::now() - start).count();
      if (WIFEXITED(status)) {
        rr.exit_code = WEXITSTATUS(status);
        rr.killed_by_launcher = false;
      }
      if (WIFSIGNALED(status)) rr.signal = WTERMSIG(status);
      done[i] = true;
      --running;
      if (options.kill_after_failure && rr.exit_code != 0 && !rr.killed_by_launcher) {
        kill_at = std::min(kill_at, Clock::now() + *options.kill_after_failure);
      }
    }
    if (running > 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (options.capture_output) {
    for (RankResult& rr : result.ranks) {
      rr.output = read_file(str_cat(dir, "/rank", rr.rank, ".log"));
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return result;
}

}  // namespace kiln::dist
