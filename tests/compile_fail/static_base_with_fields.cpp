// first-error: kiln cannot see its fields (it is not an aggregate, or a base class holds fields)
// expect: kiln_static_leaf_cannot_see_fields<{anonymous}::Scaled>
//
// A static struct whose base class holds fields: kiln sees only one class's
// fields (as a structured binding does), so it refuses with what to do instead
// of an error inside its templates (issue 34).
#include <kiln/kiln.hpp>

namespace {
struct Base {
  int width = 2;
  friend bool operator==(const Base&, const Base&) = default;
};
struct Scaled : Base {
  double scale = 0.5;
  friend bool operator==(const Scaled&, const Scaled&) = default;
  template <class H>
  friend H AbslHashValue(H h, const Scaled& s) {
    return H::combine(std::move(h), s.width, s.scale);
  }
};
}  // namespace

kiln::TreeDef use() { return kiln::tree::structure(Scaled{}); }
