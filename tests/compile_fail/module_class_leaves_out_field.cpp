// first-error: KILN_MODULE(Type, fields...) must name every field of the class
// expect: kiln_module_leaves_out_fields_of_a_class<{anonymous}::Scaled, 24, 16>
//
// A class with constructors cannot have its fields counted, but its size says
// that `k` is left out: changing k would return stale results from filter_jit
// (issue 34). KILN_NOT_IN_TREE(k) would say it is deliberate.
#include <kiln/kiln.hpp>

namespace {
class Scaled {
 public:
  Scaled() = default;
  Scaled(kiln::Array w, double k) : w_(std::move(w)), k_(k) {}

 private:
  kiln::Array w_;
  double k_ = 1.0;

 public:
  KILN_MODULE(Scaled, w_);
};
}  // namespace

kiln::TreeDef use() { return kiln::tree::structure(Scaled{}); }
