// first-error: a C array (or a string literal) cannot be a static leaf
// expect: kiln_static_leaf_rejects_c_array<char [5]>
//
// A string literal argument is a C array that decays to a pointer: refused,
// with std::string as the fix.
#include <kiln/kiln.hpp>

kiln::Array use(const kiln::Array& x) {
  auto f = kiln::filter_jit([](const kiln::Array& a, const char* s) { return s[0] == 'r' ? a : -a; });
  return f(x, "relu");
}
