// first-error: a view (std::string_view, std::span, a ranges view) cannot be a
// expect: kiln_static_leaf_rejects_view<std::span<const float>
//
// A span refers to the caller's memory.
#include <kiln/kiln.hpp>
#include <span>

namespace {
struct Model {
  kiln::Array w;
  std::span<const float> scales;
  KILN_MODULE(Model, w, scales);
};
}  // namespace

kiln::TreeDef use(const Model& m) { return kiln::tree::structure(m); }
