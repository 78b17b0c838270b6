// f32 GEMM through oneDNN's matmul primitive (compiled only when meson finds
// libdnnl-dev). Creating a primitive costs far more than running one of the
// step's small GEMMs, so primitives are cached per (m, n, k, ta, tb) (a bounded
// cache, below) and only executed afterwards, as bench/gemm_bench.cpp timed
// them. A transposed operand is described as column-major ("ba"), so nothing is
// copied.
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>

#include "kiln/backends/cpu/gemm.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::cpu {
namespace {

using Key = std::tuple<std::int64_t, std::int64_t, std::int64_t, bool, bool>;

struct Cached {
  dnnl::memory::desc a, b, c;
  dnnl::matmul prim;
};

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// Each primitive holds JIT code (~100 KiB), so programs with many shapes must
// not keep them all: at most kCapacity, the oldest evicted first. oneDNN's own
// primitive cache would keep evicted ones alive, so it is turned off unless
// the host set ONEDNN_PRIMITIVE_CACHE_CAPACITY. Entries are shared_ptrs, so an
// eviction never frees a primitive another thread is running; only the cache is
// locked, primitives execute concurrently.
constexpr std::size_t kCapacity = 64;

std::shared_ptr<const Cached> primitive(const Key& key) {
  static std::mutex mu;
  static std::map<Key, std::shared_ptr<const Cached>> cache;
  static std::deque<Key> order;  // insertion order, for eviction
  static bool configured = false;
  std::lock_guard lock(mu);
  if (!configured && std::getenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY") == nullptr &&
      std::getenv("DNNL_PRIMITIVE_CACHE_CAPACITY") == nullptr) {
    dnnl::set_primitive_cache_capacity(0);
  }
  configured = true;
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  const auto [m, n, k, ta, tb] = key;
  using tag = dnnl::memory::format_tag;
  using dt = dnnl::memory::data_type;
  auto c =
      std::make_shared<Cached>(Cached{dnnl::memory::desc({m, k}, dt::f32, ta ? tag::ba : tag::ab),
                                      dnnl::memory::desc({k, n}, dt::f32, tb ? tag::ba : tag::ab),
                                      dnnl::memory::desc({m, n}, dt::f32, tag::ab),
                                      {}});
  c->prim =
      dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(c->a, c->b, c->c), engine()));
  if (cache.size() >= kCapacity) {
    cache.erase(order.front());
    order.pop_front();
  }
  order.push_back(key);
  return cache.emplace(key, std::move(c)).first->second;
}

}  // namespace

void onednn_sgemm(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, const float* b,
                  float* c, bool ta, bool tb) {
  try {
    const std::shared_ptr<const Cached> cached = primitive(Key{m, n, k, ta, tb});
    const Cached& p = *cached;
    thread_local dnnl::stream stream(engine());
    // oneDNN's memory takes void*; the primitive only reads SRC and WEIGHTS.
    p.prim.execute(stream, {{DNNL_ARG_SRC, dnnl::memory(p.a, engine(), const_cast<float*>(a))},
                            {DNNL_ARG_WEIGHTS, dnnl::memory(p.b, engine(), const_cast<float*>(b))},
                            {DNNL_ARG_DST, dnnl::memory(p.c, engine(), c)}});
    stream.wait();
  } catch (const dnnl::error& e) {
    throw Error(detail::str_cat("[matmul] oneDNN failed: ", e.what()));
  }
}

}  // namespace kiln::cpu
