// first-error: a std::function cannot be a static leaf
// expect: kiln_static_leaf_rejects_std_function<std::function<kiln::Array(
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
