// Every KILN_* environment variable kiln reads, in one table (env.cpp), each
// parsed strictly by its kind: a value that is not what the table says is a
// ValueError naming the variable, the value and what it takes, never a silent
// default or a wrapped-around number (KILN_JIT_CACHE_LIMIT=-1 is an error, not
// 2^64-1). The README's environment table lists the same names
// (tests/test_env.cpp checks both directions and tries bad values for each).
// Internal: not installed.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace kiln::detail::env {

enum class Kind : std::uint8_t {
  kFlag,    // "0" or "1"
  kCount,   // a whole number in [min, max] (digits only: no sign, no suffix)
  kNumber,  // a finite number > 0 (seconds)
  kChoice,  // one of `choices`
  kText,    // any text (a path, an address; parsed further where it is used)
};

struct Spec {
  std::string_view name;
  Kind kind;
  std::uint64_t min = 0;
  std::uint64_t max = 0;
  std::span<const std::string_view> choices = {};
};

// The table, in the README's order.
std::span<const Spec> all();
// The entry of `name`; std::logic_error if kiln reads a variable it does not list.
const Spec& spec(std::string_view name);

// Each returns nullopt when the variable is unset or empty, and throws
// ValueError when it is set to something its kind does not take.
std::optional<bool> flag(std::string_view name);
std::optional<std::uint64_t> count(std::string_view name);
std::optional<double> number(std::string_view name);
std::optional<std::string> choice(std::string_view name);
std::optional<std::string> text(std::string_view name);

// Parses `name` by its kind (what a test of bad values calls).
void check(std::string_view name);

}  // namespace kiln::detail::env
