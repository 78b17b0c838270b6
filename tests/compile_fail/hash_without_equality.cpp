// first-error: this static leaf type has AbslHashValue but no operator==
// expect: kiln_static_leaf_requires_hash_and_equality<{anonymous}::HashOnly>
//
// A static field type with AbslHashValue but no operator== (seed 4): equal
// hashes would be taken for equal values.
#include <kiln/kiln.hpp>

namespace {
struct HashOnly {
  int v = 0;
  template <class H>
  friend H AbslHashValue(H h, const HashOnly& x) {
    return H::combine(std::move(h), x.v);
  }
};
struct Model {
  kiln::Array w;
  HashOnly config;
  KILN_MODULE(Model, w, config);
};
}  // namespace

kiln::TreeDef use() { return kiln::tree::structure(Model{}); }
