// first-error: a std::any cannot be a static leaf
// expect: kiln_static_leaf_rejects_std_any<std::any>
//
// std::any has no == and hides its contents' type: refused with kiln's message
// first, not an error inside kiln's templates (issue 34).
#include <any>
#include <kiln/kiln.hpp>

namespace {
struct Model {
  kiln::Array w;
  std::any extra;
  KILN_MODULE(Model, w, extra);
};
}  // namespace

kiln::TreeDef use() { return kiln::tree::structure(Model{}); }
