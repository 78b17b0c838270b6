// Static pytree leaves: every tree leaf that is not an Array. The jit keys its
// cache on them by value, so a static type must be hashable (Abseil) AND
// ==-comparable (seed 4), and a callable must have an identity that survives
// re-constructing the module (seed 1). Types that cannot meet this are rejected
// at compile time through the kiln_static_leaf_* templates below, whose names
// and messages show up in the compiler's diagnostic next to the offending type.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>
#include <utility>

#include "absl/hash/hash.h"

namespace kiln {

// Marks any hash+== type as a static leaf (also documents intent at the field).
// kiln copies the value into the tree structure, so mutating the module's copy
// later never changes a structure (or a jit cache key) that was already taken.
template <class T>
struct Static {
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

template <class T>
inline constexpr bool kAlwaysFalse = false;

template <class T>
inline constexpr bool kHasHash = std::is_invocable_v<absl::Hash<T>, const T&>;
template <class T>
inline constexpr bool kHasEquality = std::equality_comparable<T>;

template <class T>
struct IsStdFunction : std::false_type {};
template <class S>
struct IsStdFunction<std::function<S>> : std::true_type {};

template <class T>
struct IsStatic : std::false_type {};
template <class T>
struct IsStatic<Static<T>> : std::true_type {
  using inner = T;
};

template <class T>
inline constexpr bool kIsFunctionPointer =
    std::is_pointer_v<T>&& std::is_function_v<std::remove_pointer_t<T>>;

// A function object whose operator() is not a template (lambdas, functors).
template <class T>
concept HasCallOperator = std::is_class_v<T> && requires {
  &T::operator();
};

enum class StaticKind : std::uint8_t {
  kValue,            // hash + ==: numbers, bool, enums, std::string, user types
  kFunctionPointer,  // identity = the function's address
  kStateless,        // empty class without a hash: identity = its type
  kRejectStdFunction,
  kRejectCallable,
  kRejectPointer,
  kRejectView,
  kRejectMissing,  // lacks hash and/or ==
};

template <class T>
constexpr StaticKind static_kind() {
  if constexpr (IsStdFunction<T>::value) {
    return StaticKind::kRejectStdFunction;
  } else if constexpr (IsStatic<T>::value) {
    using U = typename IsStatic<T>::inner;
    if constexpr (IsStdFunction<U>::value)
      return StaticKind::kRejectStdFunction;
    else if constexpr (kHasHash<U> && kHasEquality<U>)
      return StaticKind::kValue;
    else if constexpr (HasCallOperator<U>)
      return StaticKind::kRejectCallable;
    else
      return StaticKind::kRejectMissing;
  } else if constexpr (kIsFunctionPointer<T>) {
    return StaticKind::kFunctionPointer;
  } else if constexpr (std::is_pointer_v<T> || std::is_member_pointer_v<T> ||
                       std::is_null_pointer_v<T>) {
    return StaticKind::kRejectPointer;
  } else if constexpr (std::is_same_v<T, std::string_view>) {
    return StaticKind::kRejectView;
  } else if constexpr (kHasHash<T> && kHasEquality<T>) {
    return StaticKind::kValue;
  } else if constexpr (std::is_class_v<T> && std::is_empty_v<T> &&
                       !kHasHash<T> && std::is_copy_constructible_v<T>) {
    // No state, so every instance does the same thing: the type is the
    // identity. (A captureless lambda has an == through its conversion to a
    // function pointer, hence no condition on ==; an empty type with a hash but
    // no == is a half-done contract and falls through to the rejection below.)
    return StaticKind::kStateless;
  } else if constexpr (HasCallOperator<T>) {
    return StaticKind::kRejectCallable;
  } else {
    return StaticKind::kRejectMissing;
  }
}

}  // namespace detail

// True when T can be a static pytree leaf (a soft check; see
// check_static_leaf).
template <class T>
concept StaticLeaf = detail::static_kind<std::remove_cvref_t<T>>()
<= detail::StaticKind::kStateless;

// ---- compile-time diagnostics: instantiated only for a rejected type ----
template <class T>
struct kiln_static_leaf_requires_hash_and_equality {
  static_assert(
      detail::kHasEquality<T>,
      "kiln: this type is used as a static pytree leaf, so it needs both "
      "AbslHashValue and operator== (seed 4); it has no operator==. Add "
      "`bool operator==(const T&) const = default;`, or make it an Array");
  static_assert(
      detail::kHasHash<T>,
      "kiln: this type is used as a static pytree leaf, so it needs both "
      "AbslHashValue and operator== (seed 4); it has no AbslHashValue. Add "
      "`template <class H> friend H AbslHashValue(H h, const T& v)`, or "
      "make it an Array");
};
template <class T>
struct kiln_static_leaf_rejects_std_function {
  static_assert(
      detail::kAlwaysFalse<T>,
      "kiln: std::function cannot be a static pytree leaf: it has no stable "
      "identity (no operator==, no hash), so a rebuilt module would always "
      "recompile (seed 1). Use a function pointer, a captureless lambda, or "
      "a named function object with operator== and AbslHashValue");
};
template <class T>
struct kiln_static_leaf_rejects_stateful_callable {
  static_assert(
      detail::kAlwaysFalse<T>,
      "kiln: this callable (a lambda with captures?) is used as a static "
      "pytree leaf, but its identity cannot be stable: its state has no "
      "operator== and AbslHashValue (seed 1). Use a function pointer, a "
      "captureless lambda, or a named function object with operator== and "
      "AbslHashValue");
};
template <class T>
struct kiln_static_leaf_rejects_pointer {
  static_assert(
      detail::kAlwaysFalse<T>,
      "kiln: a data pointer cannot be a static pytree leaf: kiln would key "
      "on the address while the pointee can change (seed 4). Store the "
      "value (std::string for text), wrap it in kiln::Static<T>, or make it "
      "an Array");
};
template <class T>
struct kiln_static_leaf_rejects_view {
  static_assert(
      detail::kAlwaysFalse<T>,
      "kiln: std::string_view cannot be a static pytree leaf: it refers to "
      "characters the caller can change (seed 4). Use std::string");
};

namespace detail {

// Instantiates the diagnostic for a rejected static leaf type; no-op otherwise.
template <class T>
constexpr void check_static_leaf() {
  constexpr StaticKind k = static_kind<T>();
  if constexpr (IsStatic<T>::value && k != StaticKind::kValue) {
    check_static_leaf<typename IsStatic<T>::inner>();
  } else if constexpr (k == StaticKind::kRejectStdFunction) {
    (void)sizeof(kiln_static_leaf_rejects_std_function<T>);
  } else if constexpr (k == StaticKind::kRejectCallable) {
    (void)sizeof(kiln_static_leaf_rejects_stateful_callable<T>);
  } else if constexpr (k == StaticKind::kRejectPointer) {
    (void)sizeof(kiln_static_leaf_rejects_pointer<T>);
  } else if constexpr (k == StaticKind::kRejectView) {
    (void)sizeof(kiln_static_leaf_rejects_view<T>);
  } else if constexpr (k == StaticKind::kRejectMissing) {
    (void)sizeof(kiln_static_leaf_requires_hash_and_equality<T>);
  }
}

// Out-of-line helpers (static.cpp).
std::string demangle(const char* mangled);
// Symbol name of the function at `address` ("relu", "ns::gelu"), without its
// parameter list; the hex address when no symbol can be found.
std::string function_name(std::uintptr_t address);
// "ns::square::{lambda(kiln::Array const&)#1}" -> "ns::square" for a lambda
// that initialises a variable; other type names are returned unchanged.
std::string closure_name(std::string demangled);
std::string format_double(double v);
std::string format_float(float v);
std::string quote(std::string_view s);

template <class T>
concept Streamable = requires(std::ostream& os, const T& v) {
  os << v;
};

template <class T>
std::string value_repr(const T& v);

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
    if constexpr (std::is_floating_point_v<T>) {
      // NaN != NaN would make a NaN hyperparameter retrace on every call.
      hash = value != value ? std::size_t{0x7ff8} : absl::Hash<T>{}(value);
    } else if constexpr (static_kind<T>() == StaticKind::kValue) {
      hash = absl::Hash<T>{}(value);
    } else if constexpr (static_kind<T>() == StaticKind::kFunctionPointer) {
      hash =
          absl::Hash<std::uintptr_t>{}(reinterpret_cast<std::uintptr_t>(value));
    } else {
      hash = typeid(T).hash_code();
    }
  }
  const std::type_info& type() const override { return typeid(T); }
  bool equals(const StaticHolder& other) const override {
    return equals_value(static_cast<const StaticHolderOf&>(other).value);
  }
  bool equals_value(const T& other_value) const {
    if constexpr (static_kind<T>() == StaticKind::kStateless) {
      return true;  // same type, no state
    } else if constexpr (std::is_floating_point_v<T>) {
      return value == other_value ||
             (value != value && other_value != other_value);
    } else {
      return value == other_value;
    }
  }
  std::string repr() const override {
    if constexpr (static_kind<T>() == StaticKind::kFunctionPointer) {
      if (value == nullptr) return "nullptr";
      return function_name(reinterpret_cast<std::uintptr_t>(value));
    } else if constexpr (static_kind<T>() == StaticKind::kStateless) {
      return closure_name(demangle(typeid(T).name()));
    } else {
      return value_repr(value);
    }
  }
  const void* get() const override { return &value; }
  T value;
};

}  // namespace detail

// A type-erased, immutable copy of a static leaf: hash, ==, type name, repr.
// Equality compares the type first and then the values with == (never the hash
// alone), so two values whose hashes collide are still different.
class StaticValue {
 public:
  StaticValue() = default;  // empty: only for default-constructed containers

  template <class T>
  static StaticValue of(T value) {
    using U = std::remove_cvref_t<T>;
    detail::check_static_leaf<U>();
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

// ---- repr of values ----
namespace detail {

std::string stream_to_string(const void* v,
                             void (*write)(std::ostream&, const void*));

template <class T>
std::string value_repr(const T& v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? "true" : "false";
  } else if constexpr (std::is_same_v<T, double> ||
                       std::is_same_v<T, long double>) {
    return format_double(static_cast<double>(v));
  } else if constexpr (std::is_same_v<T, float>) {
    return format_float(v);
  } else if constexpr (std::is_integral_v<T>) {
    return std::to_string(v);
  } else if constexpr (std::is_enum_v<T>) {
    return demangle(typeid(T).name()) + "(" +
           std::to_string(static_cast<std::int64_t>(v)) + ")";
  } else if constexpr (std::is_same_v<T, std::string>) {
    return quote(v);
  } else if constexpr (IsStatic<T>::value) {
    return value_repr(v.value);
  } else if constexpr (Streamable<T>) {
    return stream_to_string(&v, [](std::ostream& os, const void* p) {
      os << *static_cast<const T*>(p);
    });
  } else {
    return "<" + demangle(typeid(T).name()) + ">";
  }
}

}  // namespace detail
}  // namespace kiln
