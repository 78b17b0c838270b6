#include "kiln/dsl/einsum_subscripts.hpp"

#include <algorithm>

#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::detail {
namespace {

bool is_subscript_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

}  // namespace

EinsumSubscripts parse_einsum_subscripts(std::string_view subscripts, std::size_t operands) {
  std::string spec;
  for (char c : subscripts) {
    if (c != ' ') spec += c;
  }
  const std::size_t arrow = spec.find("->");
  const std::string lhs = spec.substr(0, arrow);
  EinsumSubscripts out;
  out.inputs.resize(1);
  for (char c : lhs) {
    if (c == ',') {
      out.inputs.emplace_back();
    } else if (c == '.') {
      throw ValueError(str_cat("[einsum] ellipsis ('...') is not supported, in \"", subscripts, "\""));
    } else if (!is_subscript_letter(c)) {
      throw ValueError(str_cat("[einsum] invalid character '", c, "' in \"", subscripts,
                               "\": subscripts are letters a-z, A-Z"));
    } else {
      out.inputs.back() += c;
    }
  }
  if (out.inputs.size() != operands) {
    throw ValueError(str_cat("[einsum] \"", subscripts, "\" names ", out.inputs.size(),
                             " operands but ", operands, " were given"));
  }
  if (arrow == std::string::npos) {  // implicit: letters seen once, sorted
    std::string letters = lhs;
    letters.erase(std::remove(letters.begin(), letters.end(), ','), letters.end());
    std::sort(letters.begin(), letters.end());
    for (std::size_t i = 0; i < letters.size(); ++i) {
      const bool repeated = (i > 0 && letters[i - 1] == letters[i]) ||
                            (i + 1 < letters.size() && letters[i + 1] == letters[i]);
      if (!repeated) out.output += letters[i];
    }
    return out;
  }
  out.output = spec.substr(arrow + 2);
  for (std::size_t i = 0; i < out.output.size(); ++i) {
    const char c = out.output[i];
    if (!is_subscript_letter(c)) {
      throw ValueError(str_cat("[einsum] invalid character '", c, "' in the output of \"",
                               subscripts, "\""));
    }
    if (out.output.find(c, i + 1) != std::string::npos) {
      throw ValueError(str_cat("[einsum] output letter '", c, "' appears more than once in \"",
                               subscripts, "\""));
    }
    if (lhs.find(c) == std::string::npos) {
      throw ValueError(str_cat("[einsum] output letter '", c, "' is in no operand of \"",
                               subscripts, "\""));
    }
  }
  return out;
}

}  // namespace kiln::detail
