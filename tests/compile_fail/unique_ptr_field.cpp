// first-error: a smart pointer (shared_ptr, unique_ptr, weak_ptr) cannot be a
// expect: kiln_static_leaf_rejects_smart_pointer<std::unique_ptr<int> >
//
// A unique_ptr field: kiln would key on an object the module can change.
#include <kiln/kiln.hpp>
#include <memory>

namespace {
struct Model {
  kiln::Array w;
  std::unique_ptr<int> depth;
  KILN_MODULE(Model, w, depth);
};
}  // namespace

kiln::TreeDef use(const Model& m) { return kiln::tree::structure(m); }
