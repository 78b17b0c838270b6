// first-error: a KILN_MODULE struct must be default-constructible
// unflatten default-constructs a module and assigns its fields, so a registered
// struct without a default constructor is rejected where it is used.
// expect: kiln_module_requires_default_constructor<{anonymous}::Layer>
#include <kiln/kiln.hpp>

namespace {
struct Layer {
  explicit Layer(int width) : width(width) {}
  kiln::Array w;
  int width;
  KILN_MODULE(Layer, w, width);
};
}  // namespace

Layer use() {
  const Layer layer(3);
  return kiln::tree::unflatten<Layer>(kiln::tree::structure(layer), {});
}
