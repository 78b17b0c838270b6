// first-error: this static leaf type has AbslHashValue but no operator==
// expect: kiln_static_leaf_requires_hash_and_equality<{anonymous}::Settings>
//
// Seed 4 at the jit's door: a static argument of filter_jit whose type has a hash
// but no ==. kiln would have to trust equal hashes; it refuses to compile.
#include <kiln/kiln.hpp>

namespace {
struct Settings {
  int depth = 2;
  template <class H>
  friend H AbslHashValue(H h, const Settings& s) {
    return H::combine(std::move(h), s.depth);
  }
};
}  // namespace

kiln::Array use(const kiln::Array& x) {
  auto f = kiln::filter_jit([](const kiln::Array& a, const kiln::Static<Settings>& s) {
    return a * static_cast<double>(s->depth);
  });
  return f(x, kiln::Static<Settings>{Settings{}});
}
