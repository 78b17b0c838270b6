// libFuzzer target: the checkpoint manifest parser and its comparison with a
// template (runtime/checkpoint_manifest.cpp) on arbitrary text. What parses
// must format back to text that parses to the same records, compare equal to
// itself, and pair every array of a template it matches.
#include "kiln/runtime/checkpoint_manifest.hpp"

#include <string_view>

#include "checkpoint_template.hpp"
#include "fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
  using namespace kiln;
  using namespace kiln::detail::ckpt;
  static const tree::Flat like = tree::flatten(fuzz::model_template());
  static const Manifest like_manifest = make_manifest(like.def, like.leaves);
  const std::string_view text(reinterpret_cast<const char *>(data), size);
  return fuzz::run([&] {
    const Manifest m = parse_manifest(text, "fuzz");
    const std::string formatted = format_manifest(m);
    fuzz::require(format_manifest(parse_manifest(formatted, "fuzz")) == formatted,
                  "format/parse round trip");
    fuzz::require(compare(m, m, true).differences.empty(), "a manifest differs from itself");
    const Comparison c = compare(m, like_manifest, true);
    if (c.differences.empty()) {
      fuzz::require(c.file_arrays.size() == like.leaves.size(), "one record per array");
      for (std::size_t i = 0; i < c.file_arrays.size(); ++i) {
        fuzz::require(c.file_arrays[i] < m.nodes.size() &&
                          m.nodes[c.file_arrays[i]].kind == NodeKind::kArray &&
                          m.nodes[c.file_arrays[i]].shape == like.leaves[i].shape(),
                      "arrays paired with matching records");
      }
    }
  });
}
