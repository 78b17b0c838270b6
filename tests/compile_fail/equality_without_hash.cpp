// first-error: this static leaf type has operator== but no AbslHashValue
// expect: kiln_static_leaf_requires_hash_and_equality<{anonymous}::EqOnly>
// A static field type with operator== but no AbslHashValue (seed 4).
#include <kiln/kiln.hpp>

namespace {
struct EqOnly {
  int v = 0;
  friend bool operator==(const EqOnly&, const EqOnly&) = default;
};
struct Model {
  kiln::Array w;
  EqOnly config;
  KILN_MODULE(Model, w, config);
};
}  // namespace

kiln::TreeDef use() { return kiln::tree::structure(Model{}); }
