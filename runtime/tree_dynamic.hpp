// kiln::Tree: a pytree whose shape is decided at run time (configs, optimizer
// states of unknown layout, tests). It is an Array (null = None), a static
// value, a list of Trees or a string-keyed dict of Trees (keys kept sorted,
// like JAX).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/runtime/array.hpp"
#include "kiln/runtime/static.hpp"

namespace kiln {

namespace detail {
// Static types a Tree converts from implicitly (Tree::value takes any static).
template <class T>
inline constexpr bool kImplicitTreeLeaf =
    std::is_arithmetic_v<T> || std::is_enum_v<T> ||
    std::is_same_v<T, std::string> || kIsFunctionPointer<T> ||
    kIs<T, Static>;
}  // namespace detail

class Tree {
 public:
  enum class Kind : std::uint8_t { kArray, kStatic, kList, kDict };

  Tree() = default;                              // None
  Tree(Array a) : array_(std::move(a)) {}        // NOLINT: implicit by design
  Tree(const char* s) : Tree(std::string(s)) {}  // NOLINT
  template <class T>
  requires detail::kImplicitTreeLeaf<std::remove_cvref_t<T>> Tree(
      T&& v)  // NOLINT: implicit by design
      : kind_(Kind::kStatic), static_(StaticValue::of(std::forward<T>(v))) {}

  static Tree none() { return Tree(); }
  // Any static leaf type (checked like a struct field would be), or an already
  // type-erased StaticValue.
  template <class T>
  static Tree value(T&& v) {
    Tree t;
    t.kind_ = Kind::kStatic;
    if constexpr (std::is_same_v<std::remove_cvref_t<T>, StaticValue>) {
      t.static_ = std::forward<T>(v);
    } else {
      t.static_ = StaticValue::of(std::forward<T>(v));
    }
    return t;
  }
  static Tree list(std::vector<Tree> items = {});
  // Throws TreeError on a repeated key.
  static Tree dict(std::vector<std::pair<std::string, Tree>> items = {});

  Kind kind() const { return kind_; }
  bool is_none() const { return kind_ == Kind::kArray && array_.is_null(); }
  bool is_array() const { return kind_ == Kind::kArray && !array_.is_null(); }
  bool is_static() const { return kind_ == Kind::kStatic; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_leaf() const {
    return kind_ == Kind::kArray || kind_ == Kind::kStatic;
  }

  // The array (null for None); TreeError for other kinds.
  const Array& array() const;
  const StaticValue& static_value() const;
  // The static value as a T; TreeError if it is not a static T.
  template <class T>
  const T& as() const {
    const T* p = kind_ == Kind::kStatic ? static_.get_if<T>() : nullptr;
    if (p == nullptr) throw_not_static_of(demangle_type(typeid(T)));
    return *p;
  }

  // Children of a list or dict (0 for leaves).
  std::size_t size() const { return children_.size(); }
  const std::vector<Tree>& children() const { return children_; }
  const std::vector<std::string>& keys() const { return keys_; }  // dict only
  bool contains(std::string_view key) const;

  // List element; TreeError when out of range or not a list.
  const Tree& operator[](std::size_t i) const;
  Tree& operator[](std::size_t i);
  // Dict entry; the const form throws TreeError naming the keys when missing,
  // the mutable form inserts None (and turns a None tree into a dict).
  const Tree& operator[](std::string_view key) const;
  Tree& operator[](std::string_view key);
  // Appends to a list (a None tree becomes a list).
  void push_back(Tree t);

 private:
  [[noreturn]] void throw_not_static_of(const std::string& type) const;
  static std::string demangle_type(const std::type_info& t);
  std::size_t find_key(std::string_view key) const;  // size() when absent

  Kind kind_ = Kind::kArray;
  Array array_;
  StaticValue static_;
  std::vector<Tree> children_;     // list items or dict values
  std::vector<std::string> keys_;  // dict keys, sorted, parallel to children_
};

}  // namespace kiln
