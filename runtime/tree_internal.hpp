// Helpers shared by the tree sources (tree.cpp, tree_diff.cpp, tree_dynamic.cpp,
// checkpoint_manifest.cpp): how nodes are named in messages, how child paths are
// spelled, and the pre-order walk. Not installed.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
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
// Pre-order walk of a TreeDef calling fn(index, node, path).
template <class Fn>
void walk(const TreeDefData& d, std::size_t idx, std::string& path, Fn& fn) {
  const DefNode& n = d.nodes[idx];
  fn(idx, n, std::as_const(path));
  std::size_t child = idx + 1;
  for (std::size_t i = 0; i < n.arity; ++i) {
    const std::size_t len = path.size();
    append_child(path, d, n, i);
    walk(d, child, path, fn);
    path.resize(len);
    child += d.nodes[child].size;
  }
}

// ["a", "b"] for keys[first, first + count).
std::string quoted_keys(const std::vector<std::string>& keys, std::size_t first,
                        std::size_t count);

}  // namespace kiln::detail
