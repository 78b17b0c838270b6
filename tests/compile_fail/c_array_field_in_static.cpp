// first-error: a C array (or a string literal) cannot be a static leaf
// expect: kiln_static_leaf_rejects_c_array<{anonymous}::Window>
// compilers: g++
//
// A C array field in a plain static struct: kiln finds it (parenthesized
// aggregate initialisation does not elide the array's braces) and says to use
// std::array, instead of failing inside its structured binding (issue 34).
// Clang 14 lacks parenthesized aggregate initialisation, so GCC only.
#include <kiln/kiln.hpp>

namespace {
struct Window {
  int size[2] = {3, 3};
  int stride = 1;
  friend bool operator==(const Window&, const Window&) = default;
  template <class H>
  friend H AbslHashValue(H h, const Window& w) {
    return H::combine(std::move(h), w.size[0], w.size[1], w.stride);
  }
};
}  // namespace

kiln::TreeDef use() { return kiln::tree::structure(Window{}); }
