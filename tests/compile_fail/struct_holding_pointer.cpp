// first-error: a data pointer cannot be a static leaf
// expect: check_parts<{anonymous}::Cfg, const int, const double* const>
//
// A user struct with == and a hash that holds a pointer: kiln sees its fields
// (it is an aggregate) and refuses the pointer, naming it.
#include <kiln/kiln.hpp>

namespace {
struct Cfg {
  int k = 2;
  const double* scale = nullptr;
  friend bool operator==(const Cfg&, const Cfg&) = default;
  template <class H>
  friend H AbslHashValue(H h, const Cfg& c) {
    return H::combine(std::move(h), c.k, c.scale);
  }
};
}  // namespace

kiln::Array use(const kiln::Array& x, const Cfg& cfg) {
  auto f = kiln::filter_jit([](const kiln::Array& a, const kiln::Static<Cfg>& c) {
    return a * *c->scale;
  });
  return f(x, kiln::Static<Cfg>{cfg});
}
