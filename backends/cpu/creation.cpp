// CPU kernels for creation primitives (full, arange).
#include <xtensor/xadapt.hpp>

#include "kiln/backends/cpu/cpu_backend.hpp"

namespace kiln::cpu {

std::shared_ptr<Buffer> eval_creation(Prim p, const Params& params,
                                      std::span<const Array>, const Aval& out) {
  auto buf = allocate(out);
  const std::size_t n = static_cast<std::size_t>(numel(out.shape));
  visit_dtype(out.dtype, [&](auto zero) {
    using T = decltype(zero);
    auto view = xt::adapt(static_cast<T*>(buf->host_data()), n,
                          xt::no_ownership(), std::array<std::size_t, 1>{n});
    visit_family<PrimFamily::kCreation>(p, [&]<Prim P>(PrimC<P>) {
      const auto& q = params.as<ParamsOf<P>>();
      if constexpr (P == Prim::kFull) {
        view.fill(static_cast<T>(q.value));
      } else if constexpr (P == Prim::kArange) {  // start + i * step, in double then cast
        for (std::size_t i = 0; i < n; ++i) {
          view(i) = static_cast<T>(q.start + static_cast<double>(i) * q.step);
        }
      } else {
        static_assert(kUnhandled<P>, "a creation primitive without a CPU kernel");
      }
    });
  });
  return buf;
}

}  // namespace kiln::cpu
