// first-error: a lambda with captures cannot be a static leaf
// expect: kiln_static_leaf_rejects_capturing_lambda<
//
// A generic lambda with captures (no &T::operator() to find) is still named a
// lambda with captures, not told to add operator==.
#include <kiln/kiln.hpp>

kiln::TreeDef use(double k) {
  auto act = [k](const auto& x) { return x * k; };
  struct Model {
    kiln::Array w;
    decltype(act) activation;
    KILN_MODULE(Model, w, activation);
  };
  return kiln::tree::structure(Model{kiln::Array(), act});
}
