// first-error: a data pointer cannot be a static leaf
// expect: kiln_static_leaf_rejects_pointer<const char*>
//
// A data pointer would be keyed by address while the pointee can change
// (seed 4).
#include <kiln/kiln.hpp>

namespace {
struct Model {
  kiln::Array w;
  const char* name = "mlp";
  KILN_MODULE(Model, w, name);
};
}  // namespace

kiln::TreeDef use() { return kiln::tree::structure(Model{}); }
