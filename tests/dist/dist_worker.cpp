// One rank of a dist test: dist_worker <scenario> <out dir> [args]. The group
// comes from the environment dist::launch_local sets. Results go to
// <out dir>/rank<r>.npz for the parent (test_dist.cpp) to check; a dist error
// is printed as "DIST_ERROR <type> after <seconds> s: <message>" (the
// seconds of the call that failed) with exit code 3 (timeout) or 4 (other).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "scenarios.hpp"

using namespace dist_test;
using Clock = std::chrono::steady_clock;

namespace {

Clock::time_point call_start = Clock::now();
void mark() { call_start = Clock::now(); }

std::string out_file(const std::string& dir, const dist::Group& g) {
  return dir + "/rank" + std::to_string(g.rank()) + ".npz";
}

int run(const std::string& scenario, const std::string& dir, int argc, char** argv) {
  auto arg = [&](int i, int fallback) { return argc > i ? std::atoi(argv[i]) : fallback; };
  mark();
  dist::Group group = dist::init();
  if (scenario == "join") {
    mark();
    group.barrier();
    return 0;
  }
  if (scenario == "train") {
    const nn::MLP m = train(group, group.world_size(), arg(3, 5), [](int) { mark(); });
    save_checkpoint(out_file(dir, group), m);
    return 0;
  }
  if (scenario == "kill" || scenario == "stall") {
    // The last rank dies (or stops answering) just before step `at`.
    const int at = arg(3, 2);
    const bool victim = group.rank() == group.world_size() - 1;
    train(group, group.world_size(), at + 3, [&](int step) {
      if (step == at && victim) ::raise(scenario == "kill" ? SIGKILL : SIGSTOP);
      mark();
    });
    return 0;
  }
  if (scenario == "kill_big") {
    // The last rank dies `delay` ms into a run of 64 MB all-reduces: the others
    // are mid-write to it, which must be a DistError, not death by SIGPIPE.
    if (group.rank() == group.world_size() - 1) {
      const int delay = arg(3, 100);
      std::thread([delay] {
        std::this_thread::sleep_for(std::chrono::milliseconds(delay));
        ::raise(SIGKILL);
      }).detach();
    }
    const std::vector<Array> big{full({16 << 20}, 1.0)};
    for (int i = 0; i < 200; ++i) {
      mark();
      group.all_reduce_mean(big);
    }
    return 0;
  }
  if (scenario == "tree") {
    const Grads g = group.all_reduce_mean(make_grads(group.rank()));
    const dist::Stats& s = group.last_stats();
    std::printf("buckets %zu bytes %zu\n", s.buckets, s.bytes);
    // Results come back on the device each leaf was on.
    std::printf("devices %s %s %s\n", g.mats[2].device().to_string().c_str(),
                g.wide.device().to_string().c_str(), g.half.device().to_string().c_str());
    save_checkpoint(out_file(dir, group), g);
    // A lone array is a tree too (averaging a loss for logging).
    const Array loss = group.all_reduce_mean(full({}, 2.0 * group.rank()));
    std::printf("loss %g\n", static_cast<double>(loss.item<float>()));
    return 0;
  }
  if (scenario == "broadcast") {
    const Tagged t = group.broadcast(make_tagged(group.rank()), arg(3, 0));
    save_checkpoint(out_file(dir, group), t);
    return 0;
  }
  if (scenario == "mismatch") {
    // Rank 1 passes a longer leaf; every rank must refuse, and the group must
    // still work afterwards.
    const Array mine = zeros({group.rank() == 1 ? 5 : 4});
    try {
      group.all_reduce_mean(std::vector<Array>{mine});
      std::printf("no error\n");
      return 1;
    } catch (const DistError& e) {
      std::printf("MISMATCH %s\n", e.what());
    }
    const auto v = group.all_reduce_mean(std::vector<Array>{full({4}, group.rank() + 1.0)});
    std::printf("after %g\n", static_cast<double>(v[0].to_vector<float>()[0]));
    return 0;
  }
  std::fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: dist_worker <scenario> <out dir> [args]\n");
    return 2;
  }
  try {
    return run(argv[1], argv[2], argc, argv);
  } catch (const DistError& e) {
    const double s = std::chrono::duration<double>(Clock::now() - call_start).count();
    const bool timeout = dynamic_cast<const DistTimeoutError*>(&e) != nullptr;
    std::printf("DIST_ERROR %s after %.3f s: %s\n", timeout ? "DistTimeoutError" : "DistError", s,
                e.what());
    std::fflush(stdout);
    return timeout ? 3 : 4;
  } catch (const std::exception& e) {
    std::printf("ERROR %s\n", e.what());
    return 5;
  }
}
