// CPU kernel for argsort along one axis: each line's (value, index) pairs
// sorted by value then index, which is the stable order, ascending or
// descending. NaN counts as the
// largest value (last ascending, first descending, as numpy / jnp); -0.0 and
// 0.0 are equal, so they keep their order. Ties keep their index order in both
// directions (lax.top_k's rule), the order the Vulkan kernel's (key, index)
// comparison gives.
#include <algorithm>
#include <cmath>
#include <utility>
#include <type_traits>
#include <vector>

#include "kiln/backends/cpu/bits.hpp"
#include "kiln/backends/cpu/cpu_backend.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::cpu {

std::shared_ptr<Buffer> eval_sort(Prim p, const Params& params, std::span<const Array> inputs,
                                  const Aval& out) {
  const Array& a = inputs[0];
  if (is_16bit_float(a.dtype())) {
    throw DTypeError(detail::str_cat("[", name(p), "] the CPU kernels do not sort ",
                                     name(a.dtype()), "; astype to f32 first"));
  }
  auto buf = allocate(out);
  if (numel(out.shape) == 0) return buf;
  const auto& q = params.as<SortParams>();
  const auto [outer, n, inner] = around_axis(a.shape(), static_cast<std::size_t>(q.axis));
  auto* dst = static_cast<std::int32_t*>(buf->host_data());
  visit_dtype(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* src = a.data<T>();
    // a < b in the order above (NaN largest).
    const auto less = [](T x, T y) {
      if constexpr (std::is_floating_point_v<T>) {
        if (std::isnan(x)) return false;
        if (std::isnan(y)) return true;
      }
      return x < y;
    };
    // (value, index) pairs, contiguous: comparing the index too makes every
    // pair distinct, so std::sort's result is the stable order.
    std::vector<std::pair<T, std::int32_t>> line(n);
    const auto before = [&](const std::pair<T, std::int32_t>& x,
                            const std::pair<T, std::int32_t>& y) {
      const bool lt = q.descending ? less(y.first, x.first) : less(x.first, y.first);
      if (lt) return true;
      const bool gt = q.descending ? less(x.first, y.first) : less(y.first, x.first);
      return !gt && x.second < y.second;
    };
    for (std::size_t o = 0; o < outer; ++o) {
      for (std::size_t q = 0; q < inner; ++q) {
        const T* base = src + o * n * inner + q;
        for (std::size_t j = 0; j < n; ++j) {
          line[j] = {base[j * inner], static_cast<std::int32_t>(j)};
        }
        std::sort(line.begin(), line.end(), before);
        std::int32_t* out_line = dst + o * n * inner + q;
        for (std::size_t j = 0; j < n; ++j) out_line[j * inner] = line[j].second;
      }
    }
  });
  return buf;
}

}  // namespace kiln::cpu
