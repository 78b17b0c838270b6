// first-error: so it is a static leaf, and a static leaf needs operator== and
// expect: kiln_static_leaf_requires_hash_and_equality<{anonymous}::Plain>
//
// Static<T> only marks intent: T itself still needs AbslHashValue and ==, and
// the diagnostic names T.
#include <kiln/kiln.hpp>

namespace {
struct Plain {
  int v = 0;
};
struct Model {
  kiln::Array w;
  kiln::Static<Plain> config;
  KILN_MODULE(Model, w, config);
};
}  // namespace

kiln::TreeDef use() { return kiln::tree::structure(Model{}); }
