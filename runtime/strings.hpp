// Message building for errors and printing. (Debian's Abseil is built with its own
// absl::string_view, which does not accept std::string_view, so kiln concatenates
// with this instead of absl::StrCat.) Internal: not installed.
#pragma once

#include <charconv>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>

namespace kiln::detail {

// Appends `x` as `std::ostream << x` would print it. Strings, characters and
// integers are appended directly (str_cat builds every line of every Vulkan
// kernel's text, and an ostringstream per call cost more than the rest of a
// small kernel's generation); anything else goes through a stream.
template <class T>
void append_to(std::string& out, const T& x) {
  using U = std::decay_t<T>;
  if constexpr (std::is_same_v<U, std::string> || std::is_same_v<U, std::string_view>) {
    out.append(x);
  } else if constexpr (std::is_same_v<U, const char*> || std::is_same_v<U, char*>) {
    out.append(x);
  } else if constexpr (std::is_same_v<U, char> || std::is_same_v<U, signed char> ||
                       std::is_same_v<U, unsigned char>) {
    out.push_back(static_cast<char>(x));
  } else if constexpr (std::is_same_v<U, bool>) {
    out.push_back(x ? '1' : '0');
  } else if constexpr (std::is_integral_v<U>) {
    char buf[24];
    const auto r = std::to_chars(buf, buf + sizeof(buf), x);
    out.append(buf, r.ptr);
  } else {
    std::ostringstream os;
    os << x;
    out.append(os.str());
  }
}

template <class... Args>
std::string str_cat(const Args&... args) {
  std::string out;
  (append_to(out, args), ...);
  return out;
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
