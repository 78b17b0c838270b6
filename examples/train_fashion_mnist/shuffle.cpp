#include "shuffle.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace fmnist {

std::vector<std::int32_t> permutation(kiln::Array key, std::int64_t n) {
  using namespace kiln;
  std::vector<std::int32_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  // jax.random._shuffle: enough rounds that ties in the 32-bit keys are unlikely.
  const int rounds = static_cast<int>(
      std::ceil(3.0 * std::log(std::max<double>(1, double(n))) / std::log(4294967295.0)));
  std::vector<std::int32_t> idx(order.size()), next(order.size());
  for (int r = 0; r < rounds; ++r) {
    const Array keys = random::split(key, 2);
    key = reshape(slice_axis(keys, 0, 0, 1), {2});
    const Array subkey = reshape(slice_axis(keys, 0, 1, 2), {2});
    const std::vector<std::uint32_t> sort_keys = random::bits(subkey, {n}).to_vector<std::uint32_t>();
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(),
                     [&](std::int32_t a, std::int32_t b) { return sort_keys[a] < sort_keys[b]; });
    for (std::size_t i = 0; i < idx.size(); ++i) next[i] = order[idx[i]];
    order.swap(next);
  }
  return order;
}

}  // namespace fmnist
