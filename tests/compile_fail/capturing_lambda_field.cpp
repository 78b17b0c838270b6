// first-error: a lambda with captures cannot be a static leaf
// expect: kiln_static_leaf_rejects_capturing_lambda<
//
// A lambda with captures has state without == or hash (seed 1): rejected with
// a callable-specific message.
#include <kiln/kiln.hpp>

kiln::TreeDef use(float scale) {
  auto act = [scale](const kiln::Array& x) { return x; };
  struct Model {
    kiln::Array w;
    decltype(act) activation;
    KILN_MODULE(Model, w, activation);
  };
  return kiln::tree::structure(Model{kiln::Array(), act});
}
