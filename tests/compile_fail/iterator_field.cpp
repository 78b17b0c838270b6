// first-error: an iterator cannot be a static leaf
// expect: kiln_static_leaf_rejects_iterator<
//
// An iterator refers to a container the caller can change.
#include <kiln/kiln.hpp>
#include <vector>

namespace {
struct Model {
  kiln::Array w;
  std::vector<int>::const_iterator where;
  KILN_MODULE(Model, w, where);
};
}  // namespace

kiln::TreeDef use(const Model& m) { return kiln::tree::structure(m); }
