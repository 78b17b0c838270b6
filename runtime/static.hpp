// Static pytree leaves: every tree leaf that is not an Array. The jit keys its
// cache on them by value, so a static must be a value kiln can copy, compare
// and hash, and a callable must have an identity that survives re-constructing
// the module. Which types qualify: static_kind.hpp (refusals are compile-time
// errors that say what to pass instead). How two statics compare, hash and
// print: static_rule.hpp. Here: Static<T> and StaticValue, the type-erased copy
// a TreeDef (and so a jit cache key) holds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>

#include "absl/hash/hash.h"
#include "kiln/runtime/static_kind.hpp"
#include "kiln/runtime/static_rule.hpp"

namespace kiln {

// Marks a value as a static leaf (also documents intent at the field).
// kiln copies the value into the tree structure, so mutating the module's copy
// later never changes a structure (or a jit cache key) that was already taken.
template <class T>
struct Static {
  using value_type = T;
  static_assert(!std::is_reference_v<T> && !std::is_const_v<T>,
                "kiln: Static<T> holds a value; use a plain value type T");
  T value{};

  Static() = default;
  Static(T v) : value(std::move(v)) {}  // NOLINT: implicit by design
  const T& operator*() const { return value; }
  T& operator*() { return value; }
  const T* operator->() const { return &value; }
  T* operator->() { return &value; }

  friend bool operator==(const Static& a,
                         const Static& b) requires std::equality_comparable<T> {
    return a.value == b.value;
  }
  template <class H>
  requires std::is_invocable_v < absl::Hash<T>,
  const T& > friend H AbslHashValue(H h, const Static& s) {
    return H::combine(std::move(h), s.value);
  }
};

namespace detail {

struct StaticHolder {
  virtual ~StaticHolder() = default;
  virtual const std::type_info& type() const = 0;
  // `other` has the same type(); compares the stored values with ==.
  virtual bool equals(const StaticHolder& other) const = 0;
  virtual std::string repr() const = 0;
  virtual const void* get() const = 0;
  std::size_t hash = 0;
  StaticKind kind = StaticKind::kValue;
};

template <class T>
struct StaticHolderOf final : StaticHolder {
  explicit StaticHolderOf(T v) : value(std::move(v)) {
    kind = static_kind<T>();
    hash = static_hash(value);
  }
  const std::type_info& type() const override { return typeid(T); }
  bool equals(const StaticHolder& other) const override {
    return equals_value(static_cast<const StaticHolderOf&>(other).value);
  }
  bool equals_value(const T& other_value) const { return static_equal(value, other_value); }
  std::string repr() const override {
    if constexpr (static_kind<T>() == StaticKind::kFunctionPointer) {
      if (value == nullptr) return "nullptr";
      return function_name(reinterpret_cast<std::uintptr_t>(value));
    } else if constexpr (static_kind<T>() == StaticKind::kStateless) {
      return closure_name(type_display_name(typeid(T)));
    } else {
      return value_repr(value);
    }
  }
  const void* get() const override { return &value; }
  T value;
};

}  // namespace detail

// A type-erased, immutable copy of a static leaf: hash, ==, type name, repr.
// Equality compares the type first and then the values by static_rule.hpp's
// rule (never the hash alone), so two values whose hashes collide still differ.
class StaticValue {
 public:
  StaticValue() = default;  // empty: only for default-constructed containers

  template <class T>
  static StaticValue of(T value) {
    using U = std::remove_cvref_t<T>;
    static_assert(detail::kStaticChecked<U>);
    StaticValue out;
    if constexpr (StaticLeaf<U>) {
      out.holder_ =
          std::make_shared<const detail::StaticHolderOf<U>>(std::move(value));
    }
    return out;
  }

  bool empty() const { return holder_ == nullptr; }
  std::size_t hash() const { return holder_ ? holder_->hash : 0; }
  const std::type_info& type() const;
  std::string type_name() const;  // demangled C++ type
  // Numbers, quoted strings, Enum(3), function names, closure types, or <Type>.
  std::string repr() const;
  // Function pointers and stateless function objects compare by identity.
  bool is_callable() const;
  // Whether this holds a T equal to `v` (the same rule as ==), without copying
  // `v` into a StaticValue: the jit's allocation-free cache-hit check.
  template <class T>
  bool equals_value(const T& v) const {
    if (holder_ == nullptr || holder_->type() != typeid(T)) return false;
    return static_cast<const detail::StaticHolderOf<T>&>(*holder_).equals_value(v);
  }
  template <class T>
  const T* get_if() const {
    if (holder_ == nullptr || holder_->type() != typeid(T)) return nullptr;
    return static_cast<const T*>(holder_->get());
  }

  friend bool operator==(const StaticValue& a, const StaticValue& b);
  template <class H>
  friend H AbslHashValue(H h, const StaticValue& v) {
    return H::combine(std::move(h), v.hash());
  }

 private:
  std::shared_ptr<const detail::StaticHolder> holder_;
};

}  // namespace kiln
