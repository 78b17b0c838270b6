// Threads: one Jitted (and several) called from many threads at once, misses
// racing on the same key, clear_cache during calls, grad and eager ops on many
// threads, a training step per thread. Every value is checked against the same
// work done on one thread first. Device-generic (KILN_DEVICE); CI also runs it
// under ThreadSanitizer (scripts/test --thread).
//
// Worker threads only record what they saw; the test thread asserts (doctest's
// assertions are meant for the test thread).
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <kiln/kiln.hpp>
#include <latch>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

using namespace kiln;

namespace {

constexpr int kThreads = 6;

Array ramp2(std::int64_t r, std::int64_t c, float scale) {
  std::vector<float> v(static_cast<std::size_t>(r * c));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = scale * static_cast<float>(i) - 0.5f;
  return array<float>(v, {r, c});
}

// Largest |a - b| over two arrays of one shape; infinity when the shapes differ.
float max_diff(const Array& a, const Array& b) {
  if (a.shape() != b.shape()) return INFINITY;
  const std::vector<float> x = a.to_vector<float>(), y = b.to_vector<float>();
  float d = 0;
  for (std::size_t i = 0; i < x.size(); ++i) d = std::max(d, std::abs(x[i] - y[i]));
  return d;
}

// Runs body(t) on kThreads threads that start together; returns what each
// threw ("" when nothing).
std::vector<std::string> run_threads(int n, const std::function<void(int)>& body) {
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  std::latch start(n);
  std::vector<std::thread> threads;
  for (int t = 0; t < n; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      try {
        body(t);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(t)] = e.what();
      }
    });
  }
  for (auto& th : threads) th.join();
  return errors;
}

void check_no_errors(const std::vector<std::string>& errors) {
  for (std::size_t t = 0; t < errors.size(); ++t) {
    INFO("thread ", t);
    CHECK(errors[t] == "");
  }
}

Array square(const Array& x) { return x * x; }

Array layer(const Array& x, const Array& w) { return sum(tanh(matmul(x, w)) * 2.0f + 1.0f, 1); }

}  // namespace

TEST_CASE("threads missing on the same key at once trace it once, and each gets its own values") {
  std::atomic<int> traces{0};
  auto f = filter_jit([&](const Array& x, const Array& w) {
    ++traces;
    // Tracing is slow here, so every thread arrives while the first traces.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return layer(x, w);
  });
  const Array w = ramp2(3, 5, 0.03f);
  std::vector<Array> xs, expected;
  for (int t = 0; t < kThreads; ++t) {
    xs.push_back(ramp2(4, 3, 0.01f * static_cast<float>(t + 1)));
    expected.push_back(layer(xs.back(), w));
  }
  std::vector<float> worst(kThreads, 0);
  check_no_errors(run_threads(kThreads, [&](int t) {
    for (int i = 0; i < 30; ++i) {
      worst[t] = std::max(worst[t], max_diff(f(xs[t], w), expected[t]));
    }
  }));
  CHECK(traces == 1);
  CHECK(f.trace_count() == 1);
  CHECK(f.cache_size() == 1);
  for (int t = 0; t < kThreads; ++t) CHECK(worst[t] < 1e-5f);
}

TEST_CASE("threads calling with different shapes each run their shape's program") {
  auto f = filter_jit([](const Array& x, const Array& w) { return layer(x, w); });
  const Array w = ramp2(3, 5, 0.03f);
  const Array shared = ramp2(2, 3, 0.07f);
  const Array shared_expected = layer(shared, w);
  std::vector<Array> xs, expected;
  for (int t = 0; t < kThreads; ++t) {
    xs.push_back(ramp2(t + 3, 3, 0.02f));  // a shape of its own per thread
    expected.push_back(layer(xs.back(), w));
  }
  std::vector<float> worst(kThreads, 0);
  check_no_errors(run_threads(kThreads, [&](int t) {
    for (int i = 0; i < 40; ++i) {
      const bool own = (i + t) % 2 == 0;
      const float d = own ? max_diff(f(xs[t], w), expected[t])
                          : max_diff(f(shared, w), shared_expected);
      worst[t] = std::max(worst[t], d);
    }
  }));
  CHECK(f.trace_count() == kThreads + 1);
  CHECK(f.cache_size() == kThreads + 1);
  for (int t = 0; t < kThreads; ++t) CHECK(worst[t] < 1e-5f);
}

TEST_CASE("eviction while other threads call: every call runs its own shape's program") {
  // More shapes than entries: threads keep evicting each other's programs
  // while others run them (a running entry is pinned, an evicted one retraced).
  auto f = filter_jit([](const Array& x, const Array& w) { return layer(x, w); },
                      {.name = "small_cache", .max_entries = 2});
  const Array w = ramp2(3, 5, 0.03f);
  std::vector<Array> xs, expected;
  for (int t = 0; t < kThreads; ++t) {
    xs.push_back(ramp2(t + 3, 3, 0.02f));
    expected.push_back(layer(xs.back(), w));
  }
  std::vector<float> worst(kThreads, 0);
  const std::vector<std::string> errors = run_threads(kThreads, [&](int t) {
    for (int i = 0; i < 12; ++i) {
      const int s = (t + i) % kThreads;
      worst[t] = std::max(worst[t], max_diff(f(xs[s], w), expected[s]));
    }
  });
  check_no_errors(errors);
  for (int t = 0; t < kThreads; ++t) CHECK(worst[t] < 1e-5f);
  CHECK(f.cache_size() <= 2);
  CHECK(f.eviction_count() == f.trace_count() - f.cache_size());
  CHECK(f.trace_count() > static_cast<std::size_t>(kThreads));
}

TEST_CASE("donating arrays other threads still hold: theirs are never taken") {
  // Donation is refused for any array another handle reaches, whichever
  // thread holds it: the holders read their values throughout, while the
  // donating thread's call still gets the right result.
  auto update = filter_jit([](const Array& w) { return w * 2.0f + 1.0f; });
  const Array base = ramp2(64, 8, 0.01f);
  const std::vector<float> want = (base * 2.0f + 1.0f).to_vector<float>();
  const std::vector<float> base_values = base.to_vector<float>();
  std::vector<float> worst(kThreads, 0);
  check_no_errors(run_threads(kThreads, [&](int t) {
    for (int i = 0; i < 20; ++i) {
      Array mine = base;  // shares base's buffer with every thread
      if (t % 2 == 0) {
        const Array out = update(std::move(mine));
        worst[t] = std::max(worst[t], max_diff(out, array<float>(want, {64, 8})));
        if (mine.is_donated()) throw std::runtime_error("a shared array was donated");
      } else {
        worst[t] = std::max(worst[t], max_diff(mine, array<float>(base_values, {64, 8})));
      }
    }
  }));
  for (int t = 0; t < kThreads; ++t) CHECK(worst[t] < 1e-5f);
  CHECK_FALSE(base.is_donated());
}

TEST_CASE("several jitted functions shared by several threads") {
  auto fa = filter_jit([](const Array& x) { return exp(x) - 1.0f; });
  auto fb = filter_jit([](const Array& x, const Array& w) { return layer(x, w); });
  auto fc = filter_jit([](const Array& x) { return std::tuple{max(x, 0), sum(x * x)}; });
  const Array x = ramp2(4, 3, 0.05f), w = ramp2(3, 5, 0.03f);
  const Array ea = exp(x) - 1.0f, eb = layer(x, w), ec0 = max(x, 0), ec1 = sum(x * x);
  std::vector<float> worst(kThreads, 0);
  check_no_errors(run_threads(kThreads, [&](int t) {
    for (int i = 0; i < 30; ++i) {
      float d = 0;
      switch ((i + t) % 3) {
        case 0: d = max_diff(fa(x), ea); break;
        case 1: d = max_diff(fb(x, w), eb); break;
        default: {
          auto [m, s] = fc(x);
          d = std::max(max_diff(m, ec0), max_diff(s, ec1));
        }
      }
      worst[t] = std::max(worst[t], d);
    }
  }));
  CHECK(fa.trace_count() == 1);
  CHECK(fb.trace_count() == 1);
  CHECK(fc.trace_count() == 1);
  for (int t = 0; t < kThreads; ++t) CHECK(worst[t] < 1e-5f);
}

TEST_CASE("clear_cache while other threads call: calls stay right, later calls retrace") {
  auto f = filter_jit([](const Array& x, const Array& w) { return layer(x, w); });
  const Array x = ramp2(4, 3, 0.05f), w = ramp2(3, 5, 0.03f);
  const Array expected = layer(x, w);
  std::vector<float> worst(kThreads, 0);
  check_no_errors(run_threads(kThreads, [&](int t) {
    for (int i = 0; i < 40; ++i) {
      if (t == 0 && i % 4 == 0) {
        f.clear_cache();
      } else {
        worst[t] = std::max(worst[t], max_diff(f(x, w), expected));
      }
    }
  }));
  for (int t = 0; t < kThreads; ++t) CHECK(worst[t] < 1e-5f);
  // A clear is seen by every thread's next call, including this thread's
  // remembered entry.
  f(x, w);
  const std::size_t before = f.trace_count();
  f.clear_cache();
  CHECK(f.cache_size() == 0);
  CHECK(max_diff(f(x, w), expected) < 1e-5f);
  CHECK(f.trace_count() == before + 1);
}

TEST_CASE("grad and eager ops on many threads give the one-thread values") {
  auto loss = [](const Array& w, const Array& x) { return mean(square(layer(x, w))); };
  const Array w = ramp2(3, 5, 0.03f);
  std::vector<Array> xs, values, grads;
  for (int t = 0; t < kThreads; ++t) {
    xs.push_back(ramp2(4, 3, 0.01f * static_cast<float>(t + 1)));
    auto [v, g] = value_and_grad(loss)(w, xs.back());
    values.push_back(v);
    grads.push_back(g);
  }
  std::vector<float> worst(kThreads, 0);
  check_no_errors(run_threads(kThreads, [&](int t) {
    for (int i = 0; i < 15; ++i) {
      auto [v, g] = value_and_grad(loss)(w, xs[t]);
      const Array eager = transpose(concatenate({xs[t], xs[t] * 2.0f}, 1), {1, 0});
      worst[t] = std::max({worst[t], max_diff(v, values[t]), max_diff(g, grads[t]),
                           max_diff(slice(eager, {0, 0}, {3, 4}), transpose(xs[t], {1, 0}))});
    }
  }));
  for (int t = 0; t < kThreads; ++t) CHECK(worst[t] == 0.0f);
}

namespace {

struct Net {
  std::vector<nn::Linear> layers;
  KILN_MODULE(Net, layers);
  Array operator()(const Array& x) const {
    return layers[1](relu(layers[0](x)));
  }
};

Net make_net(std::uint32_t seed) {
  const Array keys = random::split(random::key(seed), 2);
  auto row = [&](std::int64_t i) { return reshape(slice_axis(keys, 0, i, i + 1), {2}); };
  return Net{{nn::Linear(4, 8, row(0)), nn::Linear(8, 2, row(1))}};
}

}  // namespace

TEST_CASE("a training step shared by threads, each with its own model, matches one thread's run") {
  const auto opt = optim::adam(0.05);
  auto step = filter_jit([opt](const Net& m, const optim::State& s, const Array& x, const Array& y) {
    auto [l, g] = value_and_grad([](const Net& n, const Array& a, const Array& b) {
      return mean(square(n(a) - b));
    })(m, x, y);
    auto [updates, next] = opt.update(g, s, m);
    return std::tuple{optim::apply_updates(m, updates), next, l};
  });
  const Array x = ramp2(16, 4, 0.02f), y = ramp2(16, 2, 0.03f);
  auto train = [&](std::uint32_t seed) {
    Net m = make_net(seed);
    optim::State s = opt.init(optim::gradient_template(m));
    Array l;
    for (int i = 0; i < 10; ++i) std::tie(m, s, l) = step(std::move(m), std::move(s), x, y);
    return std::pair{m, l};
  };
  std::vector<std::pair<Net, Array>> alone;
  for (int t = 0; t < kThreads; ++t) alone.push_back(train(static_cast<std::uint32_t>(t)));
  CHECK(step.trace_count() == 1);
  std::vector<float> worst(kThreads, 0);
  check_no_errors(run_threads(kThreads, [&](int t) {
    auto [m, l] = train(static_cast<std::uint32_t>(t));
    const auto& [m0, l0] = alone[static_cast<std::size_t>(t)];
    worst[t] = max_diff(l, l0);
    for (std::size_t k = 0; k < 2; ++k) {
      worst[t] = std::max({worst[t], max_diff(m.layers[k].weight, m0.layers[k].weight),
                           max_diff(m.layers[k].bias, m0.layers[k].bias)});
    }
  }));
  CHECK(step.trace_count() == 1);
  for (int t = 0; t < kThreads; ++t) CHECK(worst[t] == 0.0f);  // same program, same order
}

TEST_CASE("assert_max_traces counts traces, not calls, when threads race on new keys") {
  auto f = filter_jit([](const Array& x) { return x * 3.0f; });
  auto guarded = debug::assert_max_traces(f, 2);
  const std::vector<std::string> errors = run_threads(kThreads, [&](int t) {
    guarded(ramp2(1, t + 1, 0.1f));  // every thread a new shape
  });
  int refused = 0;
  for (const std::string& e : errors) {
    if (e.empty()) continue;
    ++refused;
    CHECK(e.find("more than the allowed 2") != std::string::npos);
  }
  CHECK(refused == kThreads - 2);
  CHECK(f.trace_count() == 2);
  CHECK(max_diff(f(ramp2(1, 9, 0.1f)), ramp2(1, 9, 0.1f) * 3.0f) == 0.0f);  // original unguarded
  CHECK(f.trace_count() == 3);
}

TEST_CASE("a jitted function called inside its own trace with the same key is an error") {
  // A concrete array made outside (arrays made inside a trace are tracers,
  // which a jitted call refuses with its own message).
  const Array c = ones({3});
  std::function<Array()> inner;
  auto f = filter_jit([&](const Array& x) { return inner() + x; }, {.name = "selfish"});
  inner = [&] { return f(c); };
  try {
    f(c);
    FAIL("expected a ValueError");
  } catch (const ValueError& e) {
    CHECK(std::string(e.what()) ==
          "[selfish] called inside its own trace with the arguments being traced; call the "
          "plain function there");
  }
  CHECK(f.trace_count() == 0);
  CHECK(f.cache_size() == 0);
}

TEST_CASE("the kernel thread pool runs every task once, rethrows, and serializes nested calls") {
  const int before = num_threads();
  set_num_threads(4);
  CHECK(num_threads() == 4);
  std::vector<std::atomic<int>> hits(1000);
  std::atomic<int> nested{0};
  parallel_for(hits.size(), [&](std::size_t i) {
    hits[i].fetch_add(1);
    if (i % 100 == 0) {  // a call from a task runs on that task's thread
      parallel_for(3, [&](std::size_t) { nested.fetch_add(1); });
    }
  });
  int total = 0;
  for (const auto& h : hits) total += h.load() == 1;
  CHECK(total == 1000);
  CHECK(nested.load() == 30);
  // The first exception comes back to the caller; every task still ran.
  std::atomic<int> ran{0};
  CHECK_THROWS_WITH(parallel_for(64,
                                 [&](std::size_t i) {
                                   ran.fetch_add(1);
                                   if (i == 7) throw std::runtime_error("task 7 failed");
                                 }),
                    "task 7 failed");
  CHECK(ran.load() == 64);
  // Calls from several threads at once (one gets the pool, the others run alone).
  std::vector<std::thread> threads;
  std::vector<long> sums(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<long> part(256, 0);
      parallel_for(part.size(), [&](std::size_t i) { part[i] = static_cast<long>(i) * t; });
      for (long v : part) sums[static_cast<std::size_t>(t)] += v;
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) CHECK(sums[static_cast<std::size_t>(t)] == 255L * 256 / 2 * t);
  CHECK_THROWS_WITH_AS(set_num_threads(0), doctest::Contains("expected n >= 1"), ValueError);
  set_num_threads(before);
}

TEST_CASE("large kernels split over threads give the one-thread bits") {
  if (default_device().kind != Device::Kind::kCpu) return;  // the pool is the CPU's
  const Array x = ramp2(512, 1031, 1e-5f);  // ~528k elements: several tasks
  const Array b = ramp2(1, 1031, 3e-3f);
  const auto f = [](const Array& x, const Array& b) {
    return std::make_tuple(exp(-abs(x * 1.5f + b)) * tanh(x - b) + sigmoid(x), sqrt(abs(x)) - b);
  };
  auto jf = filter_jit([&](const Array& x, const Array& b) { return f(x, b); });
  const int before = num_threads();
  set_num_threads(1);
  const auto [one_fused, one_other] = jf(x, b);
  const Array one_eager = exp(x) + tanh(x);
  set_num_threads(3);
  const auto [many_fused, many_other] = jf(x, b);
  const Array many_eager = exp(x) + tanh(x);
  set_num_threads(before);
  CHECK(max_diff(one_fused, many_fused) == 0.0f);
  CHECK(max_diff(one_other, many_other) == 0.0f);
  CHECK(max_diff(one_eager, many_eager) == 0.0f);
  CHECK(max_diff(one_fused, std::get<0>(f(x, b))) == 0.0f);  // and the unfused ops
}

TEST_CASE("a jitted convolution's gradients (implicit GEMM) on many threads and pool sizes") {
  // 16 images: the products split over the pool, each task unfolding its own
  // columns (backends/cpu/implicit_gemm.cpp); other devices run the same
  // program from several threads.
  std::vector<float> xv(16 * 4 * 12 * 12), wv(6 * 4 * 3 * 3);
  for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = std::sin(0.37f * static_cast<float>(i));
  for (std::size_t i = 0; i < wv.size(); ++i) wv[i] = std::cos(0.11f * static_cast<float>(i));
  const Array x = array<float>(xv, {16, 4, 12, 12}), w = array<float>(wv, {6, 4, 3, 3});
  auto jf = filter_jit([](const Array& x, const Array& w) {
    auto [l, g] = value_and_grad([](const std::vector<Array>& p) {
      return sum(square(nn::conv2d(p[0], p[1], {.padding = 1})));
    })(std::vector<Array>{x, w});
    return std::tuple{l, g[0], g[1]};
  });
  const int before = num_threads();
  set_num_threads(1);
  const auto [l1, dx1, dw1] = jf(x, w);
  set_num_threads(3);
  std::vector<float> worst(kThreads, 0);
  check_no_errors(run_threads(kThreads, [&](int t) {
    const auto [l, dx, dw] = jf(x, w);
    worst[t] = std::max({max_diff(l, l1), max_diff(dx, dx1), max_diff(dw, dw1)});
  }));
  set_num_threads(before);
  CHECK(jf.trace_count() == 1);
  for (int t = 0; t < kThreads; ++t) CHECK(worst[t] == 0.0f);
}
