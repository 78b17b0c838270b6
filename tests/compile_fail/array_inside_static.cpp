// first-error: an Array inside a static value (Static<T>, a set, a map with
// expect: kiln_static_leaf_rejects_array_inside_a_value<kiln::Array>
//
// Arrays are dynamic: inside a static value they could only be keyed by value,
// which kiln refuses; the tree walks std::vector<Array> itself.
#include <kiln/kiln.hpp>
#include <vector>

kiln::Array use(const kiln::Array& x) {
  auto f = kiln::filter_jit([](const kiln::Array& a, const kiln::Static<std::vector<kiln::Array>>& s) {
    return a + s->front();
  });
  return f(x, kiln::Static<std::vector<kiln::Array>>{{x}});
}
