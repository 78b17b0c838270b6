// The Vulkan command stream under compiled programs (Executable::run): one call
// is one command buffer and one submit however many dispatches it has, barriers
// come only from dependencies (hazard tracking), results equal the CPU. Runs
// with KILN_VALIDATION=1 (synchronization validation): a missing barrier is a
// validation message, which fails the next synchronisation. Also run with
// KILN_VK_FORCE_STAGING=1 + KILN_VK_DISABLE_PUSH_DESCRIPTOR=1 (copies inside the
// command buffer, descriptor pools).
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <kiln/kiln.hpp>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "kiln/backends/vulkan/context.hpp"
#include "kiln/backends/vulkan/pipeline.hpp"
#include "kiln/backends/vulkan/profile.hpp"
#include "kiln/backends/vulkan/stream.hpp"
#include "kiln/dsl/backend.hpp"
#include "kiln/dsl/executable.hpp"
#include "kiln/dsl/trace.hpp"
#include "kiln/runtime/strings.hpp"
#include "child_process.hpp"

using namespace kiln;

namespace {

const Device kGpu = Device::vulkan(0);
// One step per equation, so the counts below do not depend on the fusion pass.
const FusionOptions kNoFusion{.enabled = false};
using Fn = std::function<std::vector<Array>(const std::vector<Array>&)>;

vk::StreamStats stats() { return vk::Context::get(0).stream().stats(); }

vk::StreamStats operator-(const vk::StreamStats& a, const vk::StreamStats& b) {
  return {a.submits - b.submits,       a.command_buffers - b.command_buffers,
          a.dispatches - b.dispatches, a.transfers - b.transfers,
          a.barriers - b.barriers,     a.reused - b.reused};
}

Array host_random(const Shape& shape, std::uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<float> v(static_cast<std::size_t>(numel(shape)));
  for (auto& x : v) x = u(g);
  return Array::from_data<float>(v, shape);
}

Program trace(const std::vector<Array>& like, const Fn& f) {
  Trace t;
  std::vector<Array> xs;
  for (std::size_t i = 0; i < like.size(); ++i) {
    xs.push_back(t.input(like[i].aval(), kGpu, "x" + std::to_string(i)));
  }
  const std::vector<Array> outs = f(xs);
  return t.finish(outs);
}

void check_close(const Array& gpu, const Array& cpu) {
  REQUIRE(gpu.device() == kGpu);
  REQUIRE(gpu.shape() == cpu.shape());
  const auto g = to_device(gpu, Device::cpu()).to_vector<float>();
  const auto c = cpu.to_vector<float>();
  std::size_t bad = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (!(std::abs(g[i] - c[i]) <= 1e-5f * std::max(1.0f, std::abs(c[i])))) ++bad;
  }
  CHECK(bad == 0);
}

// Leaves the hazard tracker in a known state: a dependent pair of eager ops
// forces a barrier, after which only the pair's own arrays (kept alive in the
// result, so no later allocation overlaps them) are tracked. Everything
// recorded before (the inputs' uploads, earlier tests' work) is ordered. The
// pair is submitted, so the call begins a command buffer of its own.
std::vector<Array> settle() {
  const Array a = to_device(host_random({16}, 7), kGpu);
  const Array b = a + a;
  std::vector<Array> keep = {b, b * b};
  vk::Context::get(0).stream().flush();
  return keep;
}

struct Run {
  std::vector<Array> outs;
  vk::StreamStats delta;
};

// Traces f on Vulkan, runs it once as a compiled program and returns its
// outputs and the stream counters of the call; checks them against f on the CPU.
Run run_checked(const std::vector<Array>& host, const Fn& f, const std::string& name) {
  std::vector<Array> in;
  for (const auto& h : host) in.push_back(to_device(h, kGpu));
  const Executable e(trace(in, f), kGpu, name, kNoFusion);
  const auto keep = settle();
  const auto before = stats();
  Run r;
  r.outs = e.run(in);
  r.delta = stats() - before;
  const std::vector<Array> want = f(host);
  REQUIRE(r.outs.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) check_close(r.outs[i], want[i]);
  synchronize(kGpu);  // validation messages surface here
  return r;
}

}  // namespace

TEST_CASE("independent elementwise ops in one call: one submit, no barrier between them") {
  const Shape s{1000, 37};
  const std::vector<Array> host = {host_random(s, 1), host_random(s, 2), host_random(s, 3)};
  const int n = 12;
  const Run r = run_checked(host, [&](const std::vector<Array>& x) {
    std::vector<Array> outs;
    for (int i = 0; i < n; ++i) {
      const Array& a = x[static_cast<std::size_t>(i % 3)];
      const Array& b = x[static_cast<std::size_t>((i + 1) % 3)];
      switch (i % 4) {
        case 0: outs.push_back(a * b); break;
        case 1: outs.push_back(a + b); break;
        case 2: outs.push_back(maximum(a, b)); break;
        default: outs.push_back(tanh(a)); break;
      }
    }
    return outs;
  }, "wide");
  CHECK(r.delta.dispatches == n);
  CHECK(r.delta.barriers == 0);
  CHECK(r.delta.submits == 1);
  CHECK(r.delta.command_buffers == 1);
}

TEST_CASE("a chain of dependent ops gets one barrier per dependency") {
  const Shape s{4099};
  const std::vector<Array> host = {host_random(s, 4), host_random(s, 5)};
  const int n = 10;
  const Run r = run_checked(host, [&](const std::vector<Array>& x) {
    Array y = x[0];
    for (int i = 0; i < n; ++i) y = i % 2 == 0 ? y * x[1] : tanh(y + x[0]);
    return std::vector<Array>{y};
  }, "chain");
  // Odd steps are two ops (add, then tanh of it): 15 dispatches, each reading
  // the one before except the first.
  CHECK(r.delta.dispatches == 15);
  CHECK(r.delta.barriers == 14);
  CHECK(r.delta.submits == 1);
}

TEST_CASE("levels of independent ops: one barrier per level") {
  const Shape s{64, 65};
  const std::vector<Array> host = {host_random(s, 6), host_random(s, 7)};
  const Run r = run_checked(host, [](const std::vector<Array>& x) {
    const Array a = x[0] * x[1], b = x[0] + x[1], c = x[0] - x[1];  // level 0
    const Array d = a * b, e = b * c, f = a - c;                    // level 1
    const Array g = d + e, h = e * f;                               // level 2
    return std::vector<Array>{g, h, maximum(g, x[0])};              // level 3
  }, "levels");
  CHECK(r.delta.dispatches == 9);
  CHECK(r.delta.barriers == 3);
  CHECK(r.delta.submits == 1);
}

TEST_CASE("a compiled program's gathers and scatters check their indices on the device: "
          "one submit, and an out-of-range index is an IndexError at the next synchronisation") {
  // (vulkan_backend.cpp check_indices: eagerly the indices are read back first;
  // inside a program that would be a host round trip every step.)
  std::vector<std::int32_t> ids(100);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 37) % 100) - 50;
  const std::vector<Array> host = {host_random({50, 8}, 4), Array::from_data<std::int32_t>(ids, {100}),
                                   host_random({100, 8}, 5)};
  const Fn f = [](const std::vector<Array>& x) {
    return std::vector<Array>{take(x[0], x[1], 0) * 2.0f, scatter_add(x[0], x[1], x[2], 0)};
  };
  const Run r = run_checked(host, f, "gather_scatter");
  CHECK(r.delta.submits == 1);
  CHECK(r.delta.transfers == 0);  // no index read back to the host
  std::vector<Array> in;
  for (const auto& h : host) in.push_back(to_device(h, kGpu));
  const Executable e(trace(in, f), kGpu, "gather_scatter", kNoFusion);
  std::vector<std::int32_t> bad = ids;
  bad[63] = 50;
  const auto with_ids = [&](const std::vector<std::int32_t>& v) {
    return std::vector<Array>{to_device(host[0], kGpu), to_device(Array::from_data<std::int32_t>(v, {100}), kGpu),
                              to_device(host[2], kGpu)};
  };
  std::vector<Array> bad_in = with_ids(bad);
  (void)e.run(bad_in);  // returns: the check runs on the device
  CHECK_THROWS_WITH_AS(synchronize(kGpu),
                       "[take] index 50 is out of range for axis 0 of size 50 (checked on the "
                       "device in a compiled program; reported at the synchronisation after "
                       "the call)",
                       IndexError);
  // Reported once, and nothing stale: the next call and its reads are right.
  synchronize(kGpu);
  std::vector<Array> good_in = with_ids(ids);
  const std::vector<Array> again = e.run(good_in);
  const std::vector<Array> want = f(host);
  for (std::size_t i = 0; i < want.size(); ++i) check_close(again[i], want[i]);
  bad[10] = -51;
  bad[63] = 3;
  bad_in = with_ids(bad);
  const std::vector<Array> outs = e.run(bad_in);
  CHECK_THROWS_AS((void)outs[0].to_vector<float>(), IndexError);  // a read synchronises too
}

TEST_CASE("a program of more than 64 dispatches is still one command buffer and one submit") {
  const Shape s{3000};
  const std::vector<Array> host = {host_random(s, 8), host_random(s, 9)};
  const int n = 150;
  const Run r = run_checked(host, [&](const std::vector<Array>& x) {
    std::vector<Array> outs;
    Array y = x[0];
    for (int i = 0; i < n; ++i) {
      y = i % 3 == 0 ? y * x[1] : i % 3 == 1 ? y + x[0] : maximum(y, x[1]);
      if (i % 10 == 0) outs.push_back(tanh(y));  // side branches, independent of later links
    }
    outs.push_back(y);
    return outs;
  }, "long");
  CHECK(r.delta.dispatches == n + 15);
  CHECK(r.delta.submits == 1);
  CHECK(r.delta.command_buffers == 1);
  // a tanh branch runs next to the following link of the chain
  CHECK(r.delta.barriers == n - 1);
}

TEST_CASE("an MLP (matmul + bias + relu layers) in one call equals the CPU") {
  const std::int64_t batch = 33, width = 70;
  std::vector<Array> host = {host_random({batch, width}, 10)};
  for (std::uint32_t l = 0; l < 3; ++l) {
    host.push_back(host_random({width, width}, 20 + l) * 0.2f);
    host.push_back(host_random({width}, 30 + l));
  }
  const Run r = run_checked(host, [](const std::vector<Array>& x) {
    Array h = x[0];
    for (std::size_t l = 0; l < 3; ++l) h = relu(matmul(h, x[1 + 2 * l]) + x[2 + 2 * l]);
    return std::vector<Array>{h};
  }, "mlp");
  CHECK(r.delta.dispatches == 9);
  CHECK(r.delta.barriers == 8);
  CHECK(r.delta.submits == 1);
}

TEST_CASE("a long chain in one call runs in the memory of its live values") {
  // Each intermediate dies after its last use; its memory takes a later output
  // in the same command buffer (behind the barrier that output needs anyway),
  // so the call's footprint is its live set, not all its intermediates.
  const std::int64_t n = 1 << 18;  // 1 MiB of f32
  // |x1| < 1: the chain contracts, so float rounding does not grow along it
  const std::vector<Array> host = {host_random({n}, 16), host_random({n}, 17) * 0.45f};
  std::vector<Array> in;
  for (const auto& h : host) in.push_back(to_device(h, kGpu));
  const int links = 80;
  const Fn f = [&](const std::vector<Array>& x) {
    Array y = x[0];
    for (int i = 0; i < links; ++i) y = i % 2 == 0 ? y * x[1] : tanh(y);
    return std::vector<Array>{y};
  };
  const Executable e(trace(in, f), kGpu, "footprint", kNoFusion);
  vk::Allocator& alloc = vk::Context::get(0).allocator();
  const auto keep = settle();
  synchronize(kGpu);
  alloc.reset_peak();
  const std::size_t base = alloc.bytes_in_use();
  const auto before = stats();
  std::vector<Array> args = in;
  const std::vector<Array> out = e.run(args);
  const auto d = stats() - before;
  CHECK(d.submits == 1);
  CHECK(d.dispatches == links);
  CHECK(d.barriers == links - 1);  // reuse adds none
  CHECK(d.reused >= links - 4);
  CHECK(alloc.peak_bytes() - base <= 4 * (std::size_t{1} << 20));
  check_close(out[0], f(host)[0]);
  synchronize(kGpu);
}

TEST_CASE("calls reusing the memory of dropped arrays are ordered (validation stays silent)") {
  const Shape s{2048};
  const std::vector<Array> host = {host_random(s, 11), host_random(s, 12)};
  const Fn f = [](const std::vector<Array>& x) {
    const Array a = x[0] * x[1];
    return std::vector<Array>{tanh(a) + x[0], a - x[1]};
  };
  std::vector<Array> in;
  for (const auto& h : host) in.push_back(to_device(h, kGpu));
  const Executable e(trace(in, f), kGpu, "reuse", kNoFusion);
  const std::vector<Array> want = f(host);
  for (int i = 0; i < 6; ++i) {
    // Back to back without waiting; every other call drops its outputs and
    // waits, so the next call's intermediates and outputs land in the memory
    // the earlier commands wrote and read.
    std::vector<Array> args = in;
    const auto before = stats();
    std::vector<Array> outs = e.run(args);
    CHECK((stats() - before).submits == 1);
    if (i % 2 == 1) {
      synchronize(kGpu);
      continue;
    }
    for (std::size_t k = 0; k < want.size(); ++k) check_close(outs[k], want[k]);
  }
  synchronize(kGpu);
}

TEST_CASE("a call that throws ends its scope: eager ops are batched again afterwards") {
  const Array a = to_device(host_random({8}, 13), kGpu);
  std::vector<Array> in = {a};
  // Its second step needs 256 GiB: out of memory after the first was recorded.
  const Executable e(trace(in, [](const std::vector<Array>& x) {
                       return std::vector<Array>{tanh(broadcast_to(tanh(x[0]), {1 << 20, 1 << 13, 8}))};
                     }),
                     kGpu, "throws", kNoFusion);
  CHECK_THROWS_AS(e.run(in), OutOfMemoryError);
  synchronize(kGpu);
  const auto before = stats();
  Array y = a;
  for (int i = 0; i < 65; ++i) y = y + a;
  CHECK((stats() - before).submits == 1);  // the 64-dispatch cap of eager batches
  CHECK((stats() - before).dispatches == 65);
  (void)y.to_vector<float>();
}

TEST_CASE("creation inside a call: take checks its indices on the device, arange uploads") {
  const std::vector<Array> host = {
      host_random({6, 5}, 14),
      Array::from_data<std::int32_t>(std::vector<std::int32_t>{0, 4, -1, 2}, {4})};
  const Run r = run_checked(host, [](const std::vector<Array>& x) {
    const Array t = take(tanh(x[0]), x[1], 1);  // x[1] checked by a kernel, not read back
    const Device was = default_device();
    set_default_device(x[0].device());
    const Array ramp = arange(0.0, 4.0, 1.0, f32);  // creation: an upload on Vulkan
    set_default_device(was);
    return std::vector<Array>{t * ramp + t};
  }, "take");
  CHECK(r.delta.submits == 1);
  CHECK(r.delta.transfers <= 1);  // arange's upload (none where memory is mapped)
}

TEST_CASE("a value written by one submit and read by the next is behind a barrier") {
  // Submission order alone orders nothing in Vulkan: the later command buffer
  // needs a barrier (whose first scope reaches back into earlier submits).
  const auto keep = settle();
  const Array x = to_device(host_random({4096}, 15), kGpu);
  vk::Stream& stream = vk::Context::get(0).stream();
  const Array a = x + x;
  stream.flush();  // submitted, not waited for
  const auto before = stats();
  const Array b = a * a;
  stream.flush();
  CHECK((stats() - before).barriers == 1);
  CHECK((stats() - before).submits == 1);
  check_close(b, to_device(x + x, Device::cpu()) * to_device(x + x, Device::cpu()));
}

TEST_CASE("memory taken from a dead array stays pending on that array's commands") {
  // An output placed in a dead array's memory inherits the wait for that array's
  // commands, even when no command of its own ever uses it (an empty result).
  vk::Allocator& alloc = vk::Context::get(0).allocator();
  const auto keep = settle();
  const Array x = to_device(host_random({1 << 18}, 18), kGpu);
  const Array e = to_device(Array::from_data<float>(std::vector<float>{}, {0}), kGpu);
  Array y = x + x;
  const Array u = y * y;  // a barrier (reads y)
  const Array v = u * u;  // a barrier (reads u): y's commands are behind it
  const std::size_t in_use = alloc.bytes_in_use();
  y = Array();  // dead while its commands are pending: not back in the allocator
  CHECK(alloc.bytes_in_use() == in_use);
  const auto before = stats();
  Array z = e + e;  // no elements, no dispatch: takes a piece of y's memory
  CHECK((stats() - before).reused == 1);
  CHECK((stats() - before).dispatches == 0);
  z = Array();
  CHECK(alloc.bytes_in_use() == in_use);  // still pending on y's batch
  synchronize(kGpu);
  CHECK(alloc.bytes_in_use() + (std::size_t{1} << 20) <= in_use);
  check_close(v, to_device(x, Device::cpu()) * to_device(x, Device::cpu()) * 4.0f *
                     (to_device(x, Device::cpu()) * to_device(x, Device::cpu()) * 4.0f));
}

TEST_CASE("another thread's work waits for a program scope instead of joining its command buffer") {
  const Array x = to_device(host_random({64}, 7), kGpu);
  Backend& backend = backend_for(kGpu);
  std::atomic<bool> inside{false}, ending{false};
  std::atomic<bool> other_done_while_inside{false};
  std::thread other;
  {
    ProgramScope scope(backend);
    const Array y = x * 2.0f;  // recorded into the scope's command buffer
    inside = true;
    other = std::thread([&] {
      const Array z = x + 1.0f;
      const std::vector<float> v = z.to_vector<float>();  // submits and waits
      other_done_while_inside = !ending.load();
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ending = true;
    scope.end();
  }
  other.join();
  CHECK(inside);
  // Had the other thread's op joined this command buffer, its read would have
  // submitted it and returned while the scope was still open.
  CHECK_FALSE(other_done_while_inside);
  check_close(x + 1.0f, to_device(x, Device::cpu()) + 1.0f);
}

TEST_CASE("a kernel key shared by two different kernels is an error under KILN_VK_CHECK_KEYS") {
  vk::PipelineCache& cache = vk::Context::get(0).pipelines();
  auto source = [](const char* constant) {
    return [constant] {
      vk::KernelSource s;
      s.text = detail::str_cat(
          "OpCapability Shader\nOpMemoryModel Logical GLSL450\nOpEntryPoint GLCompute %main \"main\"\n"
          "OpExecutionMode %main LocalSize 1 1 1\n%void = OpTypeVoid\n%fn = OpTypeFunction %void\n"
          "%u32 = OpTypeInt 32 0\n%c = OpConstant %u32 ", constant, "\n"
          "%main = OpFunction %void None %fn\n%entry = OpLabel\nOpReturn\nOpFunctionEnd\n");
      return s;
    };
  };
  const std::string key = "test/incomplete-key";
  cache.get(key, source("1"));
  cache.get(key, source("1"));  // the same kernel again: fine
  const char* check = std::getenv("KILN_VK_CHECK_KEYS");
  if (check == nullptr || std::string_view(check) == "0") return;  // the check is off
  try {
    cache.get(key, source("2"));
    FAIL("expected an Error");
  } catch (const Error& e) {
    const std::string msg = e.what();
    CHECK(msg.find("[vulkan] the kernel key \"test/incomplete-key\" is incomplete") == 0);
    CHECK(msg.find("'%c = OpConstant %u32 1' vs '%c = OpConstant %u32 2'") != std::string::npos);
  }
}

TEST_CASE("the kernel profile counts each dispatch and copy by kind, with device time") {
  if (vk::Context::get(0).caps().timestamp_period == 0.0) {
    MESSAGE("skipped: the compute queue has no timestamps");
    return;
  }
  CHECK(vk::kernel_kind("matmul|f32|T=8|reg|mnk=4,4,4") == "matmul|f32");
  CHECK(vk::kernel_kind("map|fused{add(0,1)2:f32;}") == "map|fused");
  CHECK(vk::kernel_kind("sort.pass|n=8|s=1") == "sort.pass");
  CHECK(vk::kernel_kind("scatter|add|elem") == "scatter|add");
  synchronize(kGpu);
  const bool was = vulkan::profiling(kGpu);
  vulkan::set_profiling(kGpu, true);
  vulkan::reset_profile(kGpu);
  const Array a = to_device(random::normal(random::key(0), {64, 64}), kGpu);
  // A compiled call: its two products, whatever else it runs, in one command
  // buffer (the profile counts them; traced and compiled before the profile).
  auto two = filter_jit([](const Array& x) { return matmul(matmul(x, x), x); });
  (void)two(a).to_vector<float>();
  synchronize(kGpu);
  vulkan::reset_profile(kGpu);
  const Array d = two(a);
  synchronize(kGpu);
  CHECK(vk::Context::get(0).stream().profiled_batches() == 1);
  (void)d.to_vector<float>();
  const std::vector<vulkan::KernelTime> rows = vulkan::profile(kGpu);
  vulkan::set_profiling(kGpu, was);
  std::size_t matmuls = 0;
  double total = 0.0;
  for (const auto& k : rows) {
    CHECK(k.ms >= 0.0);
    total += k.ms;
    if (k.kind.rfind("matmul|f32", 0) == 0) matmuls += k.dispatches;
  }
  CHECK(matmuls == 2);
  CHECK(total > 0.0);
  // Sorted by time, and the report names every kind.
  for (std::size_t i = 1; i < rows.size(); ++i) CHECK(rows[i - 1].ms >= rows[i].ms);
  const std::string table = vulkan::profile_report(kGpu);
  const std::string json = vulkan::profile_report(kGpu, true);
  for (const auto& k : rows) {
    CHECK(table.find(k.kind) != std::string::npos);
    CHECK(json.find("\"kind\": \"" + k.kind + "\"") != std::string::npos);
  }
  CHECK(json.find("\"command_buffers\": ") != std::string::npos);
  vulkan::reset_profile(kGpu);
  CHECK(vulkan::profile(kGpu).empty());
  CHECK_THROWS_WITH_AS(vulkan::profile(Device::cpu()),
                       doctest::Contains("[vulkan.profile] cpu is not a Vulkan device"), DeviceError);
}

// Run by the test below in a child process: one product under KILN_VK_PROFILE.
TEST_CASE("child: profiled product") {
  if (std::getenv("KILN_TEST_CHILD") == nullptr) return;
  (void)matmul(to_device(ones({32, 32}), kGpu), to_device(ones({32, 32}), kGpu)).to_vector<float>();
}

TEST_CASE("KILN_VK_PROFILE reports at exit: a table on stderr, a JSON file, or why it cannot write") {
  if (vk::Context::get(0).caps().timestamp_period == 0.0) {
    MESSAGE("skipped: the compute queue has no timestamps");
    return;
  }
  const auto child = [](const std::string& value) {
    return test::run_child("KILN_VK_PROFILE='" + value + "'", "child: profiled product");
  };
  const std::string table = child("1");
  CAPTURE(table);
  CHECK(table.find("kiln: kernel profile of vulkan:0") != std::string::npos);
  CHECK(table.find("matmul|f32") != std::string::npos);

  const std::string path = "/tmp/kiln-profile-" + std::to_string(::getpid()) + ".json";
  (void)child(path);
  std::string json;
  if (FILE* f = std::fopen(path.c_str(), "r")) {
    char buf[512];
    while (std::fgets(buf, sizeof(buf), f) != nullptr) json += buf;
    std::fclose(f);
  }
  std::remove(path.c_str());
  CAPTURE(json);
  CHECK(json.rfind("[{\"device\": \"vulkan:0", 0) == 0);
  CHECK(json.find("\"kind\": \"matmul|f32\", \"count\": 1") != std::string::npos);

  const std::string bad = child("/nonexistent-dir/p.json");
  CHECK(bad.find("kiln: KILN_VK_PROFILE: cannot write /nonexistent-dir/p.json") != std::string::npos);
}
