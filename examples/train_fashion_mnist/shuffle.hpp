// Shuffled epoch order from kiln's PRNG, computed on the host: the same
// permutation jax.random.permutation(key, n) gives (rounds of sorting 0..n-1 by
// random u32 keys), in O(n log n) as kiln::random::permutation (argsort in
// rounds); on the host, because the epoch order is consumed there.
#pragma once

#include <cstdint>
#include <vector>

#include <kiln/kiln.hpp>

namespace fmnist {

std::vector<std::int32_t> permutation(kiln::Array key, std::int64_t n);

}  // namespace fmnist
