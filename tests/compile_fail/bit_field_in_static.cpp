// first-error: a struct with a bit-field (or a packed layout) cannot be a static leaf
// expect: kiln_static_leaf_rejects_bit_field<{anonymous}::Quant>
//
// A bit-field in a plain static struct: kiln cannot read its name (its address
// cannot be taken), so it finds the bit-field first (a full-width value set in
// a constant expression reads back narrower) and says what to do, instead of
// failing inside its field-name code (issue 34). The escape hatch,
// KILN_STATIC_VALUE, is in tests/test_static_kinds.cpp.
#include <kiln/kiln.hpp>

namespace {
struct Quant {
  int bits : 5;
  bool symmetric = true;
  float scale = 1.0f;
};
}  // namespace

kiln::Array scaled(const kiln::Array& x, Quant q) { return x * q.scale; }

kiln::Array use(const kiln::Array& x) {
  auto f = kiln::filter_jit(scaled);
  return f(x, Quant{4, true, 0.5f});
}
