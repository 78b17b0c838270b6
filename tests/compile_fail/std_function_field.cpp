// expect: kiln_static_leaf_rejects_std_function<std::function<kiln::Array(
// expect: std::function cannot be a static pytree leaf
// expect: Use a function pointer, a captureless lambda, or a named function
//
// std::function has no stable identity (seed 1): rejected with what to use
// instead.
#include <functional>
#include <kiln/kiln.hpp>

namespace {
struct Model {
  kiln::Array w;
  std::function<kiln::Array(const kiln::Array&)> activation;
  KILN_MODULE(Model, w, activation);
};
}  // namespace

kiln::TreeDef use() { return kiln::tree::structure(Model{}); }
