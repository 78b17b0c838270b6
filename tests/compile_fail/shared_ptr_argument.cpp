// first-error: a smart pointer (shared_ptr, unique_ptr, weak_ptr) cannot be a
// expect: kiln_static_leaf_rejects_smart_pointer<std::shared_ptr<const {anonymous}::Cfg> >
//
// A shared_ptr static: the caller could change the shared object after kiln
// cached a program for it (a stale hit), so it is refused.
#include <kiln/kiln.hpp>
#include <memory>

namespace {
struct Cfg {
  int k = 2;
  friend bool operator==(const Cfg&, const Cfg&) = default;
  template <class H>
  friend H AbslHashValue(H h, const Cfg& c) {
    return H::combine(std::move(h), c.k);
  }
};
}  // namespace

kiln::Array use(const kiln::Array& x, std::shared_ptr<const Cfg> cfg) {
  auto f = kiln::filter_jit([](const kiln::Array& a, std::shared_ptr<const Cfg> c) {
    return a * static_cast<double>(c->k);
  });
  return f(x, cfg);
}
