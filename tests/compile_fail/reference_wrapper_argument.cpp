// first-error: a reference (std::ref, std::reference_wrapper, or a reference
// expect: kiln_static_leaf_rejects_reference<std::reference_wrapper<double> >
//
// std::ref(k) as a static argument: after the caller changes k, kiln would hit
// the entry traced for the old value.
#include <functional>
#include <kiln/kiln.hpp>

kiln::Array use(const kiln::Array& x, double& k) {
  auto f = kiln::filter_jit([](const kiln::Array& a, std::reference_wrapper<double> s) {
    return a * s.get();
  });
  return f(x, std::ref(k));
}
