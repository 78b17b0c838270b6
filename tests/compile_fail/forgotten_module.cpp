// first-error: this struct holds arrays or modules but is not registered: add
// expect: kiln_struct_holds_arrays_but_is_not_registered<{anonymous}::Block>
//
// A nested struct of arrays that forgot KILN_MODULE is told to register it.
#include <kiln/kiln.hpp>

namespace {
struct Block {
  kiln::Array w;
  kiln::Array b;
};
struct Model {
  Block block;
  kiln::Array head;
  KILN_MODULE(Model, block, head);
};
}  // namespace

kiln::TreeDef use() { return kiln::tree::structure(Model{}); }
