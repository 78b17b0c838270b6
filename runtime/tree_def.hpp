// TreeDef: the structure of a pytree without its arrays (node kinds, the C++
// type of every struct and container node, struct field names, dict keys,
// container lengths, where None is, and the values of static leaves). The jit keys its cache on it on every call, so it
// is one flat pre-order vector of small records behind a shared_ptr with the
// hash computed once; paths and printing are derived lazily from it, never
// during flatten.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <typeinfo>
#include <vector>

#include "kiln/runtime/static.hpp"

namespace kiln {

enum class NodeKind : std::uint8_t {
  kArray,   // an array slot holding an array (a leaf)
  kNone,    // an array slot holding None (a null Array); not a leaf
  kStatic,  // a static leaf; its value is in the TreeDef
  kStruct,    // a KILN_MODULE struct
  kList,      // std::vector, std::array, Tree::list
  kTuple,     // std::tuple, std::pair
  kDict,      // std::map<std::string, T>, Tree::dict (keys sorted)
  kOptional,  // std::optional: arity 1 when engaged, 0 when not. Paths,
              // printing and checkpoints see through an engaged one.
};
std::string_view name(NodeKind k);

namespace detail {

// The C++ type of a struct or container node: one per type, created once
// (node_info<T>()). Its identity is the C++ type: Pow<2> and Pow<3>, a::Linear
// and b::Linear, std::pair<Array, Array> and std::tuple<Array, Array>, an empty
// std::vector<int> and an empty std::vector<float> are different structures
// although some print alike. kiln::Tree's dynamic nodes have none (null).
struct NodeInfo {
  // Structs: as registered (KILN_MODULE(name, ...)); containers: type_name.
  std::string_view name;
  std::span<const std::string_view> fields;  // structs only
  const std::type_info* type = nullptr;
  // The full C++ type: "Pow<3>", "a::Linear", "std::pair<Array, Array>".
  std::string_view type_name;
  std::size_t hash = 0;
  // Arrays under this node get no gradient (kiln::Frozen).
  bool frozen = false;
  // Optional (a static member T::kiln_member_paths): the paths that
  // checkpoints name the .npy members of the arrays under this node by. It
  // rewrites `paths`, those arrays' tree paths relative to this node (leaf
  // order), given the node's static leaves (pre-order). optim::State names
  // its per-parameter buffers by parameter path with it. Never called on the
  // jit or grad paths.
  void (*member_paths)(std::span<const StaticValue> statics,
                       std::span<std::string> paths) = nullptr;
};

struct DefNode {
  NodeKind kind;
  std::uint32_t arity = 0;  // number of children
  std::uint32_t size = 1;   // records in this subtree, itself included
  std::uint32_t aux = 0;  // kDict: first key in keys; kStatic: index in statics
  const NodeInfo* info = nullptr;  // null for Array, None, statics, kiln::Tree
};

// Whether two nodes have one C++ type (both null: two kiln::Tree nodes).
inline bool same_type(const NodeInfo* a, const NodeInfo* b) {
  if (a == b) return true;
  if (a == nullptr || b == nullptr) return false;
  // Distinct objects for one type can arise across shared libraries; type_info
  // equality is the C++ type's identity there too.
  return a->hash == b->hash && *a->type == *b->type;
}

struct TreeDefData {
  std::vector<DefNode> nodes;  // pre-order
  std::vector<std::string> keys;
  std::vector<StaticValue> statics;
  std::size_t num_leaves = 0;  // kArray records
  std::size_t num_slots = 0;   // kArray + kNone records
  std::size_t hash = 0;
};

}  // namespace detail

class TreeDef {
 public:
  // Immutable (its records are shared, never changed): a value as a static leaf.
  KILN_STATIC_VALUE(TreeDef);
  TreeDef();  // the structure of None
  explicit TreeDef(std::shared_ptr<const detail::TreeDefData> data);

  std::size_t hash() const { return data_->hash; }
  std::size_t num_leaves() const { return data_->num_leaves; }
  std::size_t num_slots() const { return data_->num_slots; }
  std::size_t num_nodes() const { return data_->nodes.size(); }
  std::span<const detail::DefNode> nodes() const { return data_->nodes; }
  // Static leaf values in pre-order.
  std::span<const StaticValue> static_values() const { return data_->statics; }
  const detail::TreeDefData& data() const { return *data_; }

  friend bool operator==(const TreeDef& a, const TreeDef& b);
  template <class H>
  friend H AbslHashValue(H h, const TreeDef& d) {
    return H::combine(std::move(h), d.hash());
  }

 private:
  std::shared_ptr<const detail::TreeDefData> data_;
};

// MLP(layers=[Linear(weight=*, bias=None)], activation=<fn relu>): * is an
// array.
std::string to_string(const TreeDef& def);
std::ostream& operator<<(std::ostream& os, const TreeDef& def);

// A path and what sits there; see tree::slot_paths.
struct SlotPath {
  std::string path;
  NodeKind kind;  // kArray, kNone or kStatic
  friend bool operator==(const SlotPath&, const SlotPath&) = default;
};

namespace tree {

// Paths: struct fields as .name (no dot at the root), list/tuple elements as
// [i], dict keys as ["key"]; an engaged optional adds nothing. The root is "".
// One path per array leaf (non-null array), in leaf order.
std::vector<std::string> paths(const TreeDef& def);
// One per array slot (array or None) and static leaf, in pre-order.
std::vector<SlotPath> slot_paths(const TreeDef& def);
// For each array leaf, whether it sits inside a kiln::Frozen node.
std::vector<bool> frozen_leaves(const TreeDef& def);
// Path of the record at `node` (an index into def.nodes()).
std::string node_path(const TreeDef& def, std::size_t node);
// Prefixes a path with an argument name: ("model", "layers[0].w") ->
// "model.layers[0].w", ("x", "[1]") -> "x[1]", ("x", "") -> "x".
std::string join_path(std::string_view prefix, std::string_view path);
// How a path is shown in messages ("<root>" for the root).
std::string display_path(std::string_view path);

enum class DiffKind : std::uint8_t {
  kNodeKind,          // e.g. a list where a dict was
  kTypeName,          // two C++ types of struct or container (also of one printed name)
  kLength,            // list/tuple lengths
  kKeys,              // dict keys
  kNoneVsArray,       // None where an array was, or the reverse
  kStaticValue,       // same static type, different value
  kStaticType,        // static leaves of different types
  kCallableIdentity,  // a function pointer / function object changed
};
std::string_view name(DiffKind k);

struct Difference {
  std::string path;
  DiffKind kind;
  std::string description;  // "expected array, got None", "length 3 vs 2", ...
};

// Every difference between `a` (the expected/cached structure) and `b` (the new
// one), at the deepest node where it appears. Where lengths, node kinds or
// struct types differ, the children are not compared (they cannot be aligned);
// where dict keys differ, the common keys are still compared.
std::vector<Difference> diff(const TreeDef& a, const TreeDef& b);
// One line per difference: "  layers[1].bias: expected array, got None".
std::string format_diff(std::span<const Difference> diffs,
                        std::string_view indent = "  ");

}  // namespace tree
}  // namespace kiln
