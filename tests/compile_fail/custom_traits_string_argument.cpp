// first-error: has operator== but no AbslHashValue
// expect: kiln_static_leaf_requires_hash_and_equality<std::__cxx11::basic_string<char, {anonymous}::Traits>
//
// A string with its own character traits is not std::string: kiln has no hash
// for it, and says so first (issue 34).
#include <kiln/kiln.hpp>
#include <string>

namespace {
struct Traits : std::char_traits<char> {};
using Text = std::basic_string<char, Traits>;
}  // namespace

kiln::TreeDef use() { return kiln::tree::structure(Text("relu")); }
