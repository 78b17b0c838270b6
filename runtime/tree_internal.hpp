// Helpers shared by the tree sources (tree.cpp, tree_diff.cpp,
// tree_dynamic.cpp): how nodes are named in messages and how child paths are
// spelled. Not installed.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "kiln/runtime/tree_def.hpp"

namespace kiln::detail {

inline bool is_slot(NodeKind k) {
  return k == NodeKind::kArray || k == NodeKind::kNone;
}

// Short name of a node for messages: "array", "list", "Linear", "static float".
std::string describe(const TreeDefData& d, std::size_t idx);
// Appends the path step to child `i` of `parent`: ".name", "[i]" or
// "[\"key\"]".
void append_child(std::string& path, const TreeDefData& d,
                  const DefNode& parent, std::size_t i);
// ["a", "b"] for keys[first, first + count).
std::string quoted_keys(const std::vector<std::string>& keys, std::size_t first,
                        std::size_t count);

}  // namespace kiln::detail
