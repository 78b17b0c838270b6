// kiln::Tree (the dynamic pytree) and how it flattens and rebuilds.
#include <algorithm>
#include <utility>

#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"
#include "kiln/runtime/tree.hpp"
#include "kiln/runtime/tree_internal.hpp"

namespace kiln {

namespace {
std::string tree_kind(const Tree& t) {
  if (t.is_none()) return "None";
  if (t.is_array()) return "an array";
  if (t.is_static()) return "a static " + t.static_value().type_name();
  return t.is_list() ? "a list" : "a dict";
}
}  // namespace

Tree Tree::list(std::vector<Tree> items) {
  Tree t;
  t.kind_ = Kind::kList;
  t.children_ = std::move(items);
  return t;
}

Tree Tree::dict(std::vector<std::pair<std::string, Tree>> items) {
  std::sort(items.begin(), items.end(),
            [](const auto& x, const auto& y) { return x.first < y.first; });
  Tree t;
  t.kind_ = Kind::kDict;
  for (auto& [key, value] : items) {
    if (!t.keys_.empty() && t.keys_.back() == key) {
      throw TreeError(
          detail::str_cat("[Tree::dict] repeated key \"", key, "\""));
    }
    t.keys_.push_back(std::move(key));
    t.children_.push_back(std::move(value));
  }
  return t;
}

const Array& Tree::array() const {
  if (kind_ != Kind::kArray) {
    throw TreeError(
        detail::str_cat("[Tree] array(): this tree is ", tree_kind(*this)));
  }
  return array_;
}

const StaticValue& Tree::static_value() const {
  if (kind_ != Kind::kStatic) {
    throw TreeError(detail::str_cat("[Tree] static_value(): this tree is ",
                                    tree_kind(*this)));
  }
  return static_;
}

void Tree::throw_not_static_of(const std::string& type) const {
  throw TreeError(detail::str_cat("[Tree] as<", type, ">(): this tree is ",
                                  tree_kind(*this), ", not a static ", type));
}

std::string Tree::demangle_type(const std::type_info& t) {
  return detail::demangle(t.name());
}

std::size_t Tree::find_key(std::string_view key) const {
  auto it = std::lower_bound(
      keys_.begin(), keys_.end(), key,
      [](const std::string& k, std::string_view x) { return k < x; });
  if (it == keys_.end() || *it != key) return children_.size();
  return static_cast<std::size_t>(it - keys_.begin());
}

bool Tree::contains(std::string_view key) const {
  return kind_ == Kind::kDict && find_key(key) != children_.size();
}

const Tree& Tree::operator[](std::size_t i) const {
  if (kind_ != Kind::kList) {
    throw TreeError(detail::str_cat("[Tree] [", i, "]: this tree is ",
                                    tree_kind(*this), ", not a list"));
  }
  if (i >= children_.size()) {
    throw TreeError(detail::str_cat("[Tree] index ", i,
                                    " is out of range for a list of ",
                                    children_.size()));
  }
  return children_[i];
}
Tree& Tree::operator[](std::size_t i) {
  return const_cast<Tree&>(std::as_const(*this)[i]);
}

const Tree& Tree::operator[](std::string_view key) const {
  if (kind_ != Kind::kDict) {
    throw TreeError(detail::str_cat("[Tree] [\"", key, "\"]: this tree is ",
                                    tree_kind(*this), ", not a dict"));
  }
  const std::size_t i = find_key(key);
  if (i == children_.size()) {
    throw TreeError(
        detail::str_cat("[Tree] no key \"", key, "\" in a dict with keys ",
                        detail::quoted_keys(keys_, 0, keys_.size())));
  }
  return children_[i];
}

Tree& Tree::operator[](std::string_view key) {
  if (is_none()) kind_ = Kind::kDict;
  if (kind_ != Kind::kDict) return const_cast<Tree&>(std::as_const(*this)[key]);
  auto it = std::lower_bound(
      keys_.begin(), keys_.end(), key,
      [](const std::string& k, std::string_view x) { return k < x; });
  const auto pos = it - keys_.begin();
  if (it == keys_.end() || *it != key) {
    keys_.insert(it, std::string(key));
    children_.insert(children_.begin() + pos, Tree());
  }
  return children_[static_cast<std::size_t>(pos)];
}

void Tree::push_back(Tree t) {
  if (is_none()) kind_ = Kind::kList;
  if (kind_ != Kind::kList) {
    throw TreeError(detail::str_cat("[Tree] push_back: this tree is ",
                                    tree_kind(*this), ", not a list"));
  }
  children_.push_back(std::move(t));
}

namespace detail {

void flatten_tree(const Tree& t, DefBuilder& b) {
  switch (t.kind()) {
    case Tree::Kind::kArray:
      b.array(t.array());
      return;
    case Tree::Kind::kStatic:
      b.static_leaf(t.static_value());
      return;
    case Tree::Kind::kList: {
      const std::size_t idx = b.open(NodeKind::kList, t.size());
      for (const Tree& c : t.children()) flatten_tree(c, b);
      b.close(idx);
      return;
    }
    case Tree::Kind::kDict: {
      const std::size_t idx = b.open(NodeKind::kDict, t.size());
      for (const std::string& k : t.keys()) b.key(k);
      for (const Tree& c : t.children()) flatten_tree(c, b);
      b.close(idx);
      return;
    }
  }
}

Tree read_tree(Reader& r) {
  const DefNode n = r.def.nodes()[r.node];
  switch (n.kind) {
    case NodeKind::kArray:
    case NodeKind::kNone:
      ++r.node;
      if (r.per_slot || n.kind == NodeKind::kArray)
        return Tree(r.values[r.value++]);
      return Tree();
    case NodeKind::kStatic:
      ++r.node;
      return Tree::value(r.def.static_values()[n.aux]);
    case NodeKind::kList: {
      ++r.node;
      std::vector<Tree> items;
      items.reserve(n.arity);
      for (std::uint32_t i = 0; i < n.arity; ++i) items.push_back(read_tree(r));
      return Tree::list(std::move(items));
    }
    case NodeKind::kDict: {
      ++r.node;
      std::vector<std::pair<std::string, Tree>> items;
      items.reserve(n.arity);
      for (std::uint32_t i = 0; i < n.arity; ++i) {
        const std::string& key = r.def.data().keys[n.aux + i];
        items.emplace_back(key, read_tree(r));
      }
      return Tree::dict(std::move(items));
    }
    case NodeKind::kOptional:
      if (n.arity == 1) {  // an engaged optional is its value
        ++r.node;
        return read_tree(r);
      }
      [[fallthrough]];
    default:
      // Structs, tuples and empty optionals have no Tree form (it would not
      // round-trip to the same structure).
      throw_unflatten_mismatch(r, typeid(Tree));
  }
}

}  // namespace detail
}  // namespace kiln
