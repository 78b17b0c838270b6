// first-error: this function object has state but no operator== and
// expect: kiln_static_leaf_rejects_stateful_callable<{anonymous}::Scale>
//
// A named function object with state but no == or hash: kiln cannot tell two of
// them apart, so it is refused with what to add.
#include <kiln/kiln.hpp>

namespace {
struct Scale {
  kiln::Array operator()(const kiln::Array& x) const { return x * factor; }
  std::vector<double> factor_history;
  double factor = 2.0;
};
struct Model {
  kiln::Array w;
  Scale activation;
  KILN_MODULE(Model, w, activation);
};
}  // namespace

kiln::TreeDef use(const Model& m) { return kiln::tree::structure(m); }
