// Every KILN_* environment variable is parsed strictly by one table
// (runtime/env.cpp), and the README's environment table lists exactly the
// table's names (issue 41). Bad values are tried for every entry: the error
// names the variable and the value.
#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <kiln/kiln.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "kiln/runtime/env.hpp"

using namespace kiln;
namespace env = kiln::detail::env;

namespace env_test {

// The names in the first column of README's "Devices and environment" table.
std::set<std::string> readme_names() {
  const char* dir = std::getenv("KILN_SOURCE_DIR");
  REQUIRE_MESSAGE(dir != nullptr, "KILN_SOURCE_DIR is not set (tests/meson.build sets it)");
  std::ifstream in(std::string(dir) + "/README.md");
  REQUIRE(in.good());
  std::set<std::string> names;
  bool in_table = false;
  const std::regex name("`(KILN_[A-Z0-9_]+)`");
  for (std::string line; std::getline(in, line);) {
    if (line == "| variable | meaning |") in_table = true;
    else if (in_table && !line.starts_with("|")) break;
    if (!in_table || !line.starts_with("| `")) continue;
    const std::string first = line.substr(0, line.find(" | ", 2));
    for (std::sregex_iterator it(first.begin(), first.end(), name), end; it != end; ++it) {
      names.insert((*it)[1]);
    }
  }
  return names;
}

// Sets a variable for one scope.
struct Set {
  Set(const std::string& name, const std::string& value) : name(name) {
    if (const char* old = std::getenv(name.c_str())) saved = old;
    ::setenv(name.c_str(), value.c_str(), 1);
  }
  ~Set() {
    if (saved) ::setenv(name.c_str(), saved->c_str(), 1);
    else ::unsetenv(name.c_str());
  }
  std::string name;
  std::optional<std::string> saved;
};

}  // namespace env_test

using namespace env_test;

TEST_CASE("README's environment table and kiln's table of variables name the same variables") {
  std::set<std::string> table;
  for (const env::Spec& s : env::all()) table.insert(std::string(s.name));
  const std::set<std::string> readme = readme_names();
  for (const std::string& n : readme) {
    INFO(n << " is in the README but kiln does not read it (runtime/env.cpp)");
    CHECK(table.count(n) == 1);
  }
  for (const std::string& n : table) {
    INFO(n << " is read by kiln but missing from the README's table");
    CHECK(readme.count(n) == 1);
  }
  CHECK(table.size() > 30);
}

TEST_CASE("every variable refuses values of the wrong kind, naming itself and the value") {
  for (const env::Spec& s : env::all()) {
    const std::string name(s.name);
    CAPTURE(name);
    std::vector<std::string> bad, good;
    switch (s.kind) {
      case env::Kind::kFlag:
        bad = {"2", "yes", "on", " 1", "-1"};
        good = {"0", "1"};
        break;
      case env::Kind::kCount:
        bad = {"-1", "12x", "1e3", "+5", "0x10", "99999999999999999999999"};
        if (s.min > 0) bad.push_back(std::to_string(s.min - 1));
        if (s.max < ~std::uint64_t{0}) bad.push_back(std::to_string(s.max + 1));
        good = {std::to_string(s.min), std::to_string(s.max)};
        break;
      case env::Kind::kNumber:
        bad = {"0", "-2", "soon", "nan", "inf", "1s"};
        good = {"0.25", "120"};
        break;
      case env::Kind::kChoice:
        bad = {"bogus", std::string(s.choices.front()) + " "};
        for (std::string_view c : s.choices) good.emplace_back(c);
        break;
      case env::Kind::kText:
        good = {"anything"};
        break;
    }
    for (const std::string& v : bad) {
      CAPTURE(v);
      const Set set(name, v);
      const std::string want = "[environment] " + name + "=\"" + v + "\" is not ";
      CHECK_THROWS_WITH_AS(env::check(name), doctest::Contains(want.c_str()), ValueError);
    }
    for (const std::string& v : good) {
      CAPTURE(v);
      const Set set(name, v);
      CHECK_NOTHROW(env::check(name));
    }
    {
      const Set empty(name, "");  // empty reads as unset
      CHECK_NOTHROW(env::check(name));
    }
  }
}

TEST_CASE("a negative cache bound is an error, not 2^64-1") {
  {
    const Set set("KILN_JIT_CACHE_LIMIT", "-1");
    CHECK_THROWS_WITH_AS(filter_jit([](const Array& x) { return x; }),
                         doctest::Contains("KILN_JIT_CACHE_LIMIT=\"-1\" is not a whole number "
                                           "from 1 to"),
                         ValueError);
  }
  {
    const Set set("KILN_VK_MAX_PIPELINES", "-1");
    CHECK_THROWS_WITH_AS(env::count("KILN_VK_MAX_PIPELINES"),
                         doctest::Contains("KILN_VK_MAX_PIPELINES=\"-1\" is not a whole number "
                                           "from 64 to"),
                         ValueError);
  }
  CHECK_THROWS_AS(env::flag("KILN_NOT_A_VARIABLE"), std::logic_error);
}
