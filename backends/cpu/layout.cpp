// TEMPORARY: replaced by the real kernels of this family.
#include "kiln/backends/cpu/cpu_backend.hpp"
#include "kiln/runtime/error.hpp"
namespace kiln::cpu {
std::shared_ptr<Buffer> eval_layout(Prim p, const Params&, std::span<const Array>, const Aval&) { throw Error(std::string("[cpu] no kernel yet for ") + std::string(name(p))); }
}
