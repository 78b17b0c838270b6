// Message building for errors and printing. (Debian's Abseil is built with its own
// absl::string_view, which does not accept std::string_view, so kiln concatenates
// with this instead of absl::StrCat.) Internal: not installed.
#pragma once

#include <sstream>
#include <string>
#include <string_view>

namespace kiln::detail {

template <class... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

template <class Range>
std::string join(const Range& r, std::string_view sep) {
  std::ostringstream os;
  bool first = true;
  for (const auto& x : r) {
    if (!first) os << sep;
    os << x;
    first = false;
  }
  return os.str();
}

}  // namespace kiln::detail
