// libFuzzer target: kiln's small text parsers outside the checkpoint format:
// device names ("cpu", "vulkan:2"; KILN_DEVICE) and einsum's subscripts
// ("ij,jk->ik", for 1, 2 and 3 operands). Every input goes to both.
//   - A device name that parses must print back to a name that parses to the
//     same device.
//   - Subscripts that parse have one term per operand, letters only, an output
//     of distinct letters each found in some term (sorted when implicit: no
//     "->" once spaces are dropped), and
//     their canonical spelling ("ij,jk->ik") parses to the same result.
#include <algorithm>
#include <string>

#include "fuzz.hpp"
#include "kiln/dsl/einsum_subscripts.hpp"
#include "kiln/runtime/device.hpp"

namespace {

bool letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

void check_einsum(const std::string &text, std::size_t operands) {
  using kiln::fuzz::require;
  const auto parsed = kiln::detail::parse_einsum_subscripts(text, operands);
  require(parsed.inputs.size() == operands, "einsum: one term per operand");
  std::string all;
  for (const std::string &term : parsed.inputs) {
    require(std::all_of(term.begin(), term.end(), letter), "einsum: terms of letters");
    all += term;
  }
  for (std::size_t i = 0; i < parsed.output.size(); ++i) {
    const char c = parsed.output[i];
    require(letter(c), "einsum: output of letters");
    require(parsed.output.find(c, i + 1) == std::string::npos, "einsum: distinct output letters");
    require(all.find(c) != std::string::npos, "einsum: output letters in some term");
  }
  // Spaces are ignored, as numpy's einsum ignores them: "- >" is an arrow too.
  std::string squeezed = text;
  squeezed.erase(std::remove(squeezed.begin(), squeezed.end(), ' '), squeezed.end());
  if (squeezed.find("->") == std::string::npos) {
    require(std::is_sorted(parsed.output.begin(), parsed.output.end()),
            "einsum: implicit output sorted");
  }
  std::string canonical;
  for (std::size_t i = 0; i < parsed.inputs.size(); ++i) {
    canonical += (i ? "," : "") + parsed.inputs[i];
  }
  canonical += "->" + parsed.output;
  const auto again = kiln::detail::parse_einsum_subscripts(canonical, operands);
  require(again.inputs == parsed.inputs && again.output == parsed.output,
          "einsum: canonical spelling round trip");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
  using namespace kiln;
  const std::string text(reinterpret_cast<const char *>(data), size);
  fuzz::run([&] {
    const Device d = parse_device(text);
    fuzz::require(parse_device(d.to_string()) == d, "to_string/parse round trip");
  });
  for (std::size_t operands = 1; operands <= 3; ++operands) {
    fuzz::run([&] { check_einsum(text, operands); });
  }
  return 0;
}
