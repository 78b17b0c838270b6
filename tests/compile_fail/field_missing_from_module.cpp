// first-error: KILN_MODULE(Type, fields...) must name every field of the struct
// expect: kiln_module_leaves_out_fields<{anonymous}::Block, 1, 2>
//
// A field left out of KILN_MODULE would be lost by unflatten (None after a jit
// or grad): for an aggregate kiln counts the fields and refuses.
#include <kiln/kiln.hpp>

namespace {
struct Block {
  kiln::Array fc;
  kiln::Array proj;
  KILN_MODULE(Block, fc);
};
}  // namespace

kiln::TreeDef use() { return kiln::tree::structure(Block{}); }
