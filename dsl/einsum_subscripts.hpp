// einsum's subscript parser, on its own: strings in, letters out, no arrays, so
// the fuzz build (tests/fuzz, runtime only) can run it on arbitrary bytes.
// Internal (not installed); dsl/einsum.cpp is its user.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::detail {

struct EinsumSubscripts {
  std::vector<std::string> inputs;  // one per operand, a letter per axis
  std::string output;               // distinct letters, each in some input
};

// Parses "ij,jk->ik" (spaces ignored) for `operands` operands: letters a-z and
// A-Z, one comma-separated term per operand, an optional "->" and output.
// Without "->" the output is the letters that appear once, sorted (numpy's
// implicit mode). Throws ValueError naming einsum and the subscripts for any
// other character, an ellipsis, a term count other than `operands`, a repeated
// output letter or an output letter in no input.
EinsumSubscripts parse_einsum_subscripts(std::string_view subscripts, std::size_t operands);

}  // namespace kiln::detail
