// first-error: kiln cannot see its fields (it is not an aggregate, or a base class holds fields)
// expect: kiln_static_leaf_cannot_see_fields<{anonymous}::Settings>
//
// A class with == and a hash but private fields: kiln cannot check what it
// holds, so it must declare itself a value (KILN_STATIC_VALUE).
#include <kiln/kiln.hpp>

namespace {
class Settings {
 public:
  explicit Settings(const double* scale) : scale_(scale) {}
  friend bool operator==(const Settings&, const Settings&) = default;
  template <class H>
  friend H AbslHashValue(H h, const Settings& s) {
    return H::combine(std::move(h), s.scale_);
  }

 private:
  const double* scale_;
};
struct Model {
  kiln::Array w;
  Settings settings{nullptr};
  KILN_MODULE(Model, w, settings);
};
}  // namespace

kiln::TreeDef use(const Model& m) { return kiln::tree::structure(m); }
