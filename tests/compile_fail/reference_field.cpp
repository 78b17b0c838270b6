// first-error: a reference (std::ref, std::reference_wrapper, or a reference
// expect: kiln_static_leaf_rejects_reference<{anonymous}::Cfg>
//
// An aggregate with a reference field aliases the caller's variable.
#include <kiln/kiln.hpp>

namespace {
struct Cfg {
  const double& scale;
};
}  // namespace

kiln::Array use(const kiln::Array& x, const double& s) {
  auto f = kiln::filter_jit([](const kiln::Array& a, const kiln::Static<Cfg>& c) {
    return a * c->scale;
  });
  return f(x, kiln::Static<Cfg>{Cfg{s}});
}
