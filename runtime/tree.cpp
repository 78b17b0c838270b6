// TreeDef equality/hash, lazily derived paths and printing, and the out-of-line
// parts of the tree templates (their errors, slot bookkeeping).
#include "kiln/runtime/tree.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <functional>
#include <ostream>
#include <unordered_map>

#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"
#include "kiln/runtime/tree_internal.hpp"

namespace kiln {

std::string_view name(NodeKind k) {
  switch (k) {
    case NodeKind::kArray:
      return "array";
    case NodeKind::kNone:
      return "None";
    case NodeKind::kStatic:
      return "static";
    case NodeKind::kStruct:
      return "struct";
    case NodeKind::kList:
      return "list";
    case NodeKind::kTuple:
      return "tuple";
    case NodeKind::kDict:
      return "dict";
    case NodeKind::kOptional:
      return "optional";
  }
  return "?";
}

namespace {

using detail::append_child;
using detail::DefNode;
using detail::describe;
using detail::is_slot;
using detail::TreeDefData;

std::size_t mix(std::size_t h, std::size_t v) {
  return h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
}

void print(const TreeDefData& d, std::size_t idx, std::string& out) {
  const DefNode& n = d.nodes[idx];
  std::size_t child = idx + 1;
  auto children = [&](std::string_view open, std::string_view close,
                      auto&& label) {
    out += open;
    for (std::size_t i = 0; i < n.arity; ++i) {
      if (i > 0) out += ", ";
      label(i);
      print(d, child, out);
      child += d.nodes[child].size;
    }
    if (n.kind == NodeKind::kTuple && n.arity == 1) out += ",";
    out += close;
  };
  switch (n.kind) {
    case NodeKind::kArray:
      out += "*";
      break;
    case NodeKind::kNone:
      out += "None";
      break;
    case NodeKind::kOptional:  // an engaged one prints as its value
      if (n.arity == 0) out += "nullopt";
      else print(d, child, out);
      break;
    case NodeKind::kStatic: {
      const StaticValue& v = d.statics[n.aux];
      out += v.is_callable() ? "<fn " + v.repr() + ">" : v.repr();
      break;
    }
    case NodeKind::kStruct:
      out += n.info->name;
      children("(", ")", [&](std::size_t i) {
        out += n.info->fields[i];
        out += "=";
      });
      break;
    case NodeKind::kList:
      children("[", "]", [](std::size_t) {});
      break;
    case NodeKind::kTuple:
      children("(", ")", [](std::size_t) {});
      break;
    case NodeKind::kDict:
      children("{", "}", [&](std::size_t i) {
        out += "\"" + d.keys[n.aux + i] + "\": ";
      });
      break;
  }
}

const TreeDefData& none_data() {
  static const auto* data = [] {
    detail::DefBuilder b(nullptr);
    b.array(Array());
    return new TreeDef(
        b.finish());  // never destroyed: shared by every TreeDef()
  }();
  return data->data();
}

}  // namespace

// ---- helpers shared with tree_diff.cpp and tree_dynamic.cpp ----
namespace detail {

std::string describe(const TreeDefData& d, std::size_t idx) {
  const DefNode& n = d.nodes[idx];
  if (n.kind == NodeKind::kStruct) return std::string(n.info->name);
  if (n.kind == NodeKind::kStatic)
    return "static " + d.statics[n.aux].type_name();
  if (n.kind == NodeKind::kOptional) {
    return n.arity == 0 ? "empty optional" : "optional of " + describe(d, idx + 1);
  }
  return std::string(name(n.kind));
}

void append_child(std::string& path, const TreeDefData& d,
                  const DefNode& parent, std::size_t i) {
  switch (parent.kind) {
    case NodeKind::kStruct:
      if (!path.empty()) path += '.';
      path += parent.info->fields[i];
      break;
    case NodeKind::kDict:
      path += "[\"";
      path += d.keys[parent.aux + i];
      path += "\"]";
      break;
    case NodeKind::kOptional:  // an engaged optional adds nothing
      break;
    default:
      path += '[';
      path += std::to_string(i);
      path += ']';
  }
}

std::string quoted_keys(const std::vector<std::string>& keys, std::size_t first,
                        std::size_t count) {
  std::string out = "[";
  for (std::size_t i = 0; i < count; ++i) {
    if (i > 0) out += ", ";
    out += "\"" + keys[first + i] + "\"";
  }
  return out + "]";
}

}  // namespace detail

// ---- TreeDef ----
namespace detail {

TreeDef DefBuilder::finish() {
  hint() = SizeHint{d_->nodes.size(), d_->num_leaves, d_->statics.size()};
  std::size_t h = mix(0, d_->nodes.size());
  for (const DefNode& n : d_->nodes) {
    h = mix(h, static_cast<std::size_t>(n.kind) | (std::size_t{n.arity} << 8));
    if (n.info != nullptr) h = mix(h, n.info->hash);
  }
  for (const std::string& k : d_->keys) h = mix(h, std::hash<std::string>{}(k));
  for (const StaticValue& s : d_->statics) h = mix(h, s.hash());
  d_->hash = h;
  return TreeDef(std::move(d_));
}

}  // namespace detail

TreeDef::TreeDef()
    : data_(std::shared_ptr<const TreeDefData>(std::shared_ptr<void>(),
                                               &none_data())) {}
TreeDef::TreeDef(std::shared_ptr<const detail::TreeDefData> data)
    : data_(std::move(data)) {}

bool operator==(const TreeDef& a, const TreeDef& b) {
  const TreeDefData& x = *a.data_;
  const TreeDefData& y = *b.data_;
  if (&x == &y) return true;
  if (x.hash != y.hash || x.nodes.size() != y.nodes.size()) return false;
  for (std::size_t i = 0; i < x.nodes.size(); ++i) {
    const DefNode& p = x.nodes[i];
    const DefNode& q = y.nodes[i];
    if (p.kind != q.kind || p.arity != q.arity || !detail::same_type(p.info, q.info))
      return false;
  }
  // Statics compare by type and ==, never by hash alone (seed 4).
  return x.keys == y.keys && x.statics == y.statics;
}

std::string to_string(const TreeDef& def) {
  std::string out;
  print(def.data(), 0, out);
  return out;
}
std::ostream& operator<<(std::ostream& os, const TreeDef& def) {
  return os << to_string(def);
}

// ---- paths ----
namespace tree {

std::vector<std::string> paths(const TreeDef& def) {
  std::vector<std::string> out;
  out.reserve(def.num_leaves());
  std::string path;
  auto fn = [&](std::size_t, const DefNode& n, const std::string& p) {
    if (n.kind == NodeKind::kArray) out.push_back(p);
  };
  walk(def.data(), 0, path, fn);
  return out;
}

std::string summary(const TreeDef& def, std::span<const Array> leaves) {
  const std::vector<std::string> ps = paths(def);
  const std::vector<bool> frozen = frozen_leaves(def);
  std::vector<std::array<std::string, 4>> rows;
  std::array<std::size_t, 4> width{};
  std::int64_t elements = 0;
  std::uint64_t bytes = 0;
  for (std::size_t i = 0; i < leaves.size() && i < ps.size(); ++i) {
    const Array& a = leaves[i];
    rows.push_back({display_path(ps[i]) + (frozen[i] ? " (frozen)" : ""), std::string(name(a.dtype())),
                    to_string(a.shape()), std::to_string(a.size())});
    for (std::size_t c = 0; c < 4; ++c) width[c] = std::max(width[c], rows.back()[c].size());
    elements += a.size();
    bytes += a.nbytes();
  }
  std::string out;
  for (const auto& r : rows) {
    for (std::size_t c = 0; c < 4; ++c) {
      const std::string pad(width[c] - r[c].size(), ' ');
      out += c == 3 ? pad + r[c] : r[c] + pad + "  ";  // counts right-aligned
    }
    out += "\n";
  }
  char size[32];
  if (bytes >= (1u << 20)) {
    std::snprintf(size, sizeof size, "%.1f MiB", static_cast<double>(bytes) / (1u << 20));
  } else if (bytes >= 1024) {
    std::snprintf(size, sizeof size, "%.1f KiB", static_cast<double>(bytes) / 1024);
  } else {
    std::snprintf(size, sizeof size, "%llu B", static_cast<unsigned long long>(bytes));
  }
  out += detail::str_cat(rows.size(), rows.size() == 1 ? " array, " : " arrays, ", elements,
                         " elements, ", size, "\n");
  return out;
}

std::vector<bool> frozen_leaves(const TreeDef& def) {
  std::vector<bool> out;
  out.reserve(def.num_leaves());
  std::size_t frozen_until = 0;  // end (exclusive) of the open Frozen subtree
  const auto& nodes = def.nodes();
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const DefNode& n = nodes[i];
    if (n.kind == NodeKind::kStruct && n.info->frozen && i >= frozen_until) {
      frozen_until = i + n.size;
    }
    if (n.kind == NodeKind::kArray) out.push_back(i < frozen_until);
  }
  return out;
}

std::vector<SlotPath> slot_paths(const TreeDef& def) {
  std::vector<SlotPath> out;
  std::string path;
  auto fn = [&](std::size_t, const DefNode& n, const std::string& p) {
    if (is_slot(n.kind) || n.kind == NodeKind::kStatic)
      out.push_back({p, n.kind});
  };
  walk(def.data(), 0, path, fn);
  return out;
}

std::string node_path(const TreeDef& def, std::size_t node) {
  const TreeDefData& d = def.data();
  std::string path;
  std::size_t idx = 0;
  while (idx != node) {
    const DefNode& n = d.nodes[idx];
    std::size_t child = idx + 1;
    std::size_t i = 0;
    while (node >= child + d.nodes[child].size) {
      child += d.nodes[child].size;
      ++i;
    }
    append_child(path, d, n, i);
    idx = child;
  }
  return path;
}

std::string join_path(std::string_view prefix, std::string_view path) {
  if (path.empty()) return std::string(prefix);
  if (prefix.empty() || path.front() == '[')
    return detail::str_cat(prefix, path);
  return detail::str_cat(prefix, ".", path);
}

std::string display_path(std::string_view path) {
  return path.empty() ? std::string("<root>") : std::string(path);
}

}  // namespace tree

// ---- out-of-line parts of the templates ----
namespace detail {

void throw_unflatten_mismatch(const Reader& r, const std::type_info& want) {
  const TreeDefData& d = r.def.data();
  const DefNode& n = d.nodes[r.node];
  std::string found = describe(d, r.node);
  if (n.kind == NodeKind::kList || n.kind == NodeKind::kTuple) {
    found = str_cat(found, " of length ", n.arity);
  }
  throw TreeError(str_cat("[tree.unflatten] at ",
                          tree::display_path(tree::node_path(r.def, r.node)),
                          ": cannot rebuild a ", demangle(want.name()),
                          " from a ", found, " in the structure ",
                          to_string(r.def)));
}

void check_leaves(const TreeDef& def, std::span<const Array> leaves) {
  if (leaves.size() != def.num_leaves()) {
    throw TreeError(str_cat("[tree.unflatten] the structure has ",
                            def.num_leaves(), " array leaves, got ",
                            leaves.size(), " arrays"));
  }
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    if (leaves[i].is_null()) {
      throw TreeError(str_cat("[tree.unflatten] leaf ", i,
                              " is None, but the structure has an array at ",
                              tree::display_path(tree::paths(def)[i])));
    }
  }
}

std::vector<Array> expand_slots(const TreeDef& def,
                                std::span<const Array> leaves) {
  std::vector<Array> slots;
  slots.reserve(def.num_slots());
  std::size_t leaf = 0;
  for (const DefNode& n : def.nodes()) {
    if (n.kind == NodeKind::kArray) slots.push_back(leaves[leaf++]);
    if (n.kind == NodeKind::kNone) slots.emplace_back();
  }
  return slots;
}

void throw_structure_mismatch(std::string_view op, std::size_t index,
                              const TreeDef& expected, const TreeDef& got) {
  throw TreeError(str_cat("[", op, "] tree ", index,
                          " does not have the structure of tree 0:\n",
                          tree::format_diff(tree::diff(expected, got))));
}

std::vector<Array> combine_slots(const TreeDef& a,
                                 std::span<const Array> a_leaves,
                                 const TreeDef& b,
                                 std::span<const Array> b_leaves) {
  std::vector<tree::Difference> diffs = tree::diff(a, b);
  std::erase_if(diffs, [](const tree::Difference& d) {
    return d.kind == tree::DiffKind::kNoneVsArray;
  });
  if (!diffs.empty()) {
    throw TreeError(
        str_cat("[tree.combine] the trees have different structures:\n",
                tree::format_diff(diffs)));
  }
  // Without other differences the records align one to one.
  std::vector<Array> slots;
  slots.reserve(a.num_slots());
  std::vector<std::string> conflicts;
  std::size_t ia = 0;
  std::size_t ib = 0;
  for (std::size_t i = 0; i < a.num_nodes(); ++i) {
    const NodeKind ka = a.nodes()[i].kind;
    const NodeKind kb = b.nodes()[i].kind;
    if (!is_slot(ka)) continue;
    Array x = ka == NodeKind::kArray ? a_leaves[ia++] : Array();
    Array y = kb == NodeKind::kArray ? b_leaves[ib++] : Array();
    if (!x.is_null() && !y.is_null()) {
      conflicts.push_back(tree::display_path(tree::node_path(a, i)));
    }
    slots.push_back(x.is_null() ? std::move(y) : std::move(x));
  }
  if (!conflicts.empty()) {
    throw TreeError(str_cat("[tree.combine] both trees have an array at ",
                            join(conflicts, ", ")));
  }
  return slots;
}

std::size_t slot_of_path(std::string_view op, const TreeDef& def,
                         std::string_view path) {
  std::vector<std::string> known;
  for (const SlotPath& s : tree::slot_paths(def)) {
    if (s.kind == NodeKind::kStatic) continue;
    if (s.path == path) return known.size();
    known.push_back(tree::display_path(s.path));
  }
  throw TreeError(str_cat("[", op, "] no array slot at '", path,
                          "'; the array slots are: ", join(known, ", ")));
}

}  // namespace detail

}  // namespace kiln
