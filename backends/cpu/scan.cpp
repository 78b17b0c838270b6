// CPU kernels for the inclusive scans (cumsum, cumprod) along one axis. The
// array is viewed as (outer, n, inner); each step combines a whole row of
// `inner` elements with the previous result row, so the inner loop is
// contiguous and vectorises. Every column accumulates in axis order (or from
// the end with ScanParams::reverse), the order the Vulkan kernel uses, so the two
// backends agree bit for bit. i32 wraps (computed on u32 bits).
#include <cstring>
#include <type_traits>

#include "kiln/backends/cpu/bits.hpp"
#include "kiln/backends/cpu/cpu_backend.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::cpu {
namespace {

template <class S, bool kProd>
void scan_kernel(const S* in, S* out, std::size_t outer, std::size_t n, std::size_t inner,
                 bool reverse) {
  for (std::size_t o = 0; o < outer; ++o) {
    const S* src = in + o * n * inner;
    S* dst = out + o * n * inner;
    for (std::size_t step = 0; step < n; ++step) {
      const std::size_t j = reverse ? n - 1 - step : step;
      const S* x = src + j * inner;
      S* y = dst + j * inner;
      if (step == 0) {
        std::memcpy(y, x, inner * sizeof(S));
        continue;
      }
      const S* prev = reverse ? y + inner : y - inner;
      for (std::size_t q = 0; q < inner; ++q) {
        if constexpr (kProd) {
          y[q] = static_cast<S>(prev[q] * x[q]);
        } else {
          y[q] = static_cast<S>(prev[q] + x[q]);
        }
      }
    }
  }
}

}  // namespace

std::shared_ptr<Buffer> eval_scan(Prim p, const Params& params, std::span<const Array> inputs,
                                  const Aval& out) {
  const Array& a = inputs[0];
  if (is_16bit_float(a.dtype()) || a.dtype() == DType::kBool) {
    throw DTypeError(detail::str_cat("[", name(p), "] the CPU backend does not scan ",
                                     name(a.dtype()), "; astype to f32 or i32 first"));
  }
  auto buf = allocate(out);
  if (numel(out.shape) == 0) return buf;
  const auto& q = params.as<ScanParams>();
  const auto [outer, n, inner] = around_axis(a.shape(), static_cast<std::size_t>(q.axis));
  visit_dtype(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    using S = std::conditional_t<std::is_same_v<T, std::int32_t>, std::uint32_t, T>;
    const S* in = static_cast<const S*>(a.buffer()->host_data());
    S* dst = static_cast<S*>(buf->host_data());
    visit_family<PrimFamily::kScan>(p, [&]<Prim P>(PrimC<P>) {
      if constexpr (P == Prim::kCumprod) {
        scan_kernel<S, true>(in, dst, outer, n, inner, q.reverse);
      } else if constexpr (P == Prim::kCumsum) {
        scan_kernel<S, false>(in, dst, outer, n, inner, q.reverse);
      } else {
        static_assert(kUnhandled<P>, "a scan without a CPU kernel");
      }
    });
  });
  return buf;
}

}  // namespace kiln::cpu
