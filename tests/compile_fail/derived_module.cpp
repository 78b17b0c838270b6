// first-error: this struct's KILN_MODULE registration belongs to another type
// expect: kiln_module_registration_names_another_type<{anonymous}::Wide>
//
// A struct derived from a registered module inherits the base's registration;
// walking it as the base would silently drop the derived fields.
#include <kiln/kiln.hpp>

namespace {
struct Base {
  kiln::Array w;
  KILN_MODULE(Base, w);
};
struct Wide : Base {
  kiln::Array extra;
};
}  // namespace

kiln::TreeDef use() { return kiln::tree::structure(Wide{}); }
