// JSON string text for the benches' --json lines (bench/peers.py reads them).
#pragma once

#include <string>

namespace kiln_bench {

// `text` with '"' and '\\' escaped, for use between JSON quotes.
inline std::string escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace kiln_bench
