// What the dist tests' rank processes (dist_worker.cpp) and the checking
// parent (test_dist.cpp) share: the model, the data, the training loop and the
// trees they reduce, so the parent can compute what each rank should get.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <kiln/dist/dist.hpp>
#include <kiln/kiln.hpp>
#include <utility>

namespace dist_test {

using namespace kiln;

constexpr std::int64_t kIn = 6, kOut = 3, kWidth = 16, kDepth = 2, kRowsPerRank = 8;

inline nn::MLP make_model(std::uint32_t seed) {
  return nn::MLP(kIn, kOut, kWidth, kDepth, random::key(seed), tanh);
}

// Step `step`'s batch for a world of `world` ranks: rank r's shard is rows
// [r * kRowsPerRank, (r + 1) * kRowsPerRank).
inline std::pair<Array, Array> global_batch(int world, int step) {
  const Array k = random::fold_in(random::key(1234), static_cast<std::uint32_t>(step));
  const std::int64_t rows = world * kRowsPerRank;
  return {random::normal(random::fold_in(k, 0), {rows, kIn}),
          random::normal(random::fold_in(k, 1), {rows, kOut})};
}

inline Array shard(const Array& a, int rank, int count) {
  return slice_axis(a, 0, rank * kRowsPerRank, (rank + count) * kRowsPerRank);
}

inline Array loss(const nn::MLP& m, const Array& x, const Array& y) { return nn::mse(m(x), y); }

// `steps` steps of data-parallel Adam: a jitted gradient of this rank's
// shard, the group's mean of the gradients outside the jit, a jitted update.
// `world_rows`: how many ranks' worth of rows the global batch has (a group of
// one trains on the whole batch of a larger world). `before_step` lets a
// scenario misbehave at a given step.
inline nn::MLP train(const dist::Group& group, int world_rows, int steps,
                     const std::function<void(int)>& before_step = {}) {
  const auto opt = optim::adam(1e-2);
  auto grad_step = filter_jit([](const nn::MLP& m, const Array& x, const Array& y) {
    return value_and_grad(loss)(m, x, y);
  });
  auto update = filter_jit([opt](const nn::MLP& m, const optim::State& s, const nn::MLP& g) {
    auto [u, s2] = opt.update(g, s, m);
    return std::pair{optim::apply_updates(m, u), s2};
  });
  nn::MLP model = group.broadcast(make_model(7));
  optim::State state = opt.init(optim::gradient_template(model));
  const int ranks_here = group.world_size() == 1 ? world_rows : 1;
  for (int i = 0; i < steps; ++i) {
    if (before_step) before_step(i);
    const auto [x, y] = global_batch(world_rows, i);
    const int first = group.world_size() == 1 ? 0 : group.rank();
    auto [l, g] = grad_step(model, shard(x, first, ranks_here), shard(y, first, ranks_here));
    g = group.all_reduce_mean(g);
    std::tie(model, state) = update(model, state, g);
  }
  return model;
}

// A gradient-like tree with None slots, scalars, matrices, a leaf larger than
// a bucket, and f64 and f16 leaves.
struct Grads {
  Array scalar;             // f32 ()
  std::vector<Array> mats;  // f32 (2, 5), None, f32 (kBig)
  Array wide;               // f64 (7)
  Array half;               // f16 (5)
  Array none;               // None
  KILN_MODULE(Grads, scalar, mats, wide, half, none);
};
constexpr std::int64_t kBig = 300'000;  // 1.2 MB: several 256 KiB buckets

// f16 arrays are made from their bits on the host (the CPU backend has no f16
// arithmetic) and moved to the default device; these values are exact in f16.
inline std::uint16_t half_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) == 0) return static_cast<std::uint16_t>(u >> 16);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const int exp = static_cast<int>((u >> 23) & 0xffu) - 127 + 15;  // normal halves only
  return static_cast<std::uint16_t>(sign | (static_cast<std::uint32_t>(exp) << 10) |
                                    ((u >> 13) & 0x3ffu));
}
inline float half_value(std::uint16_t h) {
  const std::uint32_t sign = (h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  std::uint32_t u = sign;
  if (exp != 0) u |= ((exp - 15 + 127) << 23) | (mant << 13);  // normal (and zero)
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline Array half_array(const std::vector<float>& v) {
  auto buf = HostBuffer::allocate(v.size() * 2);
  auto* h = static_cast<std::uint16_t*>(buf->host_data());
  for (std::size_t i = 0; i < v.size(); ++i) h[i] = half_bits(v[i]);
  return to_device(Array(f16, {static_cast<std::int64_t>(v.size())}, buf), default_device());
}
// Any float array's values as f32 (f16 read as bits: the CPU cannot astype it).
inline std::vector<float> values(const Array& a) {
  if (a.dtype() != f16) return astype(a, f32).to_vector<float>();
  std::vector<std::uint16_t> bits(static_cast<std::size_t>(a.size()));
  a.buffer()->read(bits.data());
  std::vector<float> out;
  for (auto b : bits) out.push_back(half_value(b));
  return out;
}

// Rank r's values: element i of every leaf is (i % 17) * 0.25 + r, so the
// mean over ranks 0..w-1 is rank 0's values + (w - 1) / 2, exactly (in f16 too).
inline Array ramp(std::int64_t n, int rank, DType dtype) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] = static_cast<float>(i % 17) * 0.25f + static_cast<float>(rank);
  }
  return dtype == f16 ? half_array(v) : astype(array<float>(v, {n}), dtype);
}
inline Grads make_grads(int rank) {
  Grads g;
  g.scalar = reshape(ramp(1, rank, f32) + 0.5f, {});
  g.mats = {reshape(ramp(10, rank, f32), {2, 5}), Array(), ramp(kBig, rank, f32)};
  g.wide = ramp(7, rank, f64);
  g.half = ramp(5, rank, f16);
  return g;
}

// A model with an integer and a bool leaf, for broadcast (any dtype moves).
struct Tagged {
  nn::MLP model;
  Array step;  // i32
  Array mask;  // bool
  KILN_MODULE(Tagged, model, step, mask);
};
inline Tagged make_tagged(int rank) {
  return Tagged{make_model(100 + static_cast<std::uint32_t>(rank)),
                array<std::int32_t>({10 * rank + 1}), array<bool>({rank % 2 == 0, true})};
}

}  // namespace dist_test
