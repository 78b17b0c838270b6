// What kiln can see of an aggregate struct without reflection: how many fields
// it has (counted the way brace initialisation counts them), each field's
// declared type and value (through a structured binding), and each field's name
// (from the compiler's spelling of a pointer to it in __PRETTY_FUNCTION__).
// Static leaves use this to check that a user struct holds values only and to
// compare and print it field by field; KILN_MODULE uses the count to refuse a
// registration that leaves a field out. Internal (namespace kiln::detail).
//
// Limits: at most kMaxAggregateFields fields; empty base classes only (a base
// with fields makes the type invisible: it must say what it is some other way,
// see static.hpp); no C array fields (found with parenthesized initialisation,
// which does not elide braces: such a type is not visible); no bit-fields
// (their names cannot be read; bit_field finds most of them, below).
#pragma once

#include <array>
#include <cstddef>
#include <limits>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

namespace kiln::detail {

inline constexpr std::size_t kMaxAggregateFields = 32;

// Converts to any field type in an unevaluated brace initialisation. The
// conversion is const-qualified so that a field type with a forwarding
// constructor (std::optional<U>, std::function) picks that constructor instead
// of being ambiguous.
struct AnyField {
  template <class U>
  operator U&() const noexcept;  // declared only: used in unevaluated operands
};

template <class T, std::size_t... I>
constexpr bool brace_initializable(std::index_sequence<I...>) {
  return requires { T{((void)I, AnyField{})...}; };
}

// Initializers of the aggregate T (its bases, then its fields): the largest
// N <= kMaxAggregateFields + 1 such that T{x1, ..., xN} compiles. (Not the
// first N that fails: a reference field without an initializer makes every
// shorter list fail.)
template <class T, std::size_t N = kMaxAggregateFields + 1>
constexpr std::size_t count_initializers() {
  if constexpr (brace_initializable<T>(std::make_index_sequence<N>())) {
    return N;
  } else if constexpr (N == 0) {
    return 0;
  } else {
    return count_initializers<T, N - 1>();
  }
}

// Converts only to a base class of T: the first initializers of T that it can
// be are T's bases (aggregate initialisation initialises bases first).
template <class T>
struct AnyBase {
  template <class U>
    requires(std::is_base_of_v<U, T> && !std::is_same_v<U, T>)
  operator U&() const noexcept;  // declared only
};
template <class T, std::size_t B, std::size_t N, std::size_t... I>
constexpr bool bases_then_fields(std::index_sequence<I...>) {
  return requires { T{std::conditional_t<(I < B), AnyBase<T>, AnyField>{}...}; };
}
// How many of T's N initializers are bases.
template <class T, std::size_t N, std::size_t B = 0>
constexpr std::size_t count_bases() {
  if constexpr (B < N && bases_then_fields<T, B + 1, N>(std::make_index_sequence<N>())) {
    return count_bases<T, N, B + 1>();
  } else {
    return B;
  }
}

template <class T>
constexpr bool plain_aggregate() {
  return std::is_class_v<T> && !std::is_union_v<T> && std::is_aggregate_v<T>;
}

// Whether T has a C array field. Brace initialisation elides an array's braces,
// so its elements count as initializers (and the structured binding over that
// many fields fails); parenthesized aggregate initialisation (C++20) elides
// none, so it takes fewer. Compilers without it (Clang < 16) see none.
#if defined(__cpp_aggregate_paren_init) && __cpp_aggregate_paren_init >= 201902L
template <class T, std::size_t... I>
constexpr bool paren_initializable(std::index_sequence<I...>) {
  return requires { T(((void)I, AnyField{})...); };
}
template <class T, std::size_t N>
constexpr bool has_c_array_field() {
  if constexpr (N < 2) {
    return false;  // T(x) with one value is a copy: it tells nothing
  } else {
    return !paren_initializable<T>(std::make_index_sequence<N>());
  }
}
#else
template <class T, std::size_t N>
constexpr bool has_c_array_field() {
  return false;
}
#endif
template <class T>
constexpr bool c_array_field() {
  if constexpr (plain_aggregate<T>()) {
    return has_c_array_field<T, count_initializers<T>()>();
  } else {
    return false;
  }
}


// T's own fields (its initializers less its bases).
template <class T>
constexpr std::size_t count_fields() {
  if constexpr (!plain_aggregate<T>()) {
    return 0;
  } else {
    constexpr std::size_t n = count_initializers<T>();
    return n - count_bases<T, n>();
  }
}

template <class T>
constexpr bool bit_field();

// Whether kiln can see T's fields: a non-union aggregate with at most
// kMaxAggregateFields fields, no C array or bit-field found among them (see
// bit_field), all of them its own (bases, if any, empty: a
// standard-layout class keeps all its fields in one class, so with fields of
// its own its bases have none; a base with fields is invisible, as to
// structured bindings).
template <class T>
constexpr bool visible_aggregate() {
  if constexpr (!plain_aggregate<T>()) {
    return false;
  } else {
    constexpr std::size_t n = count_initializers<T>();
    constexpr std::size_t bases = count_bases<T, n>();
    if constexpr (n > kMaxAggregateFields || c_array_field<T>() || bit_field<T>()) {
      return false;
    } else if constexpr (bases == 0) {
      return true;
    } else {
      return std::is_standard_layout_v<T> && (n > bases || std::is_empty_v<T>);
    }
  }
}

// Calls f(std::type_identity<std::tuple<declared field types...>>{}, fields...)
// with references to v's fields. A reference field's declared type is a
// reference type (decltype of a structured binding names the member's type).
template <std::size_t N, class T, class F>
constexpr decltype(auto) with_fields(T& v, F&& f) {
  if constexpr (N == 0) {
    return f(std::type_identity<std::tuple<>>{});
#include "kiln/runtime/aggregate_fields.inc"
  }
}

template <class T>
constexpr std::size_t kFieldCount = count_fields<T>();

// std::tuple<declared field types...> of a visible aggregate. (A named function
// object, not a lambda: GCC 12 miscompiles a lambda in this alias template when
// the alias is used inside a constexpr function.)
struct TypesOfFields {
  template <class Types, class... Fields>
  constexpr Types operator()(Types types, const Fields&...) const {
    return types;
  }
};
template <class T>
using FieldTypes = typename decltype(with_fields<kFieldCount<T>>(std::declval<const T&>(),
                                                                 TypesOfFields{}))::type;

// Calls f(field) for each field of v, in declaration order.
template <class T, class F>
constexpr void for_each_field(T& v, F&& f) {
  with_fields<kFieldCount<std::remove_const_t<T>>>(v, [&](auto, auto&... fields) {
    (f(fields), ...);
  });
}

// ---- bit-fields ----
// kiln cannot read a bit-field's name (its address cannot be taken), and C++20
// cannot ask whether a field is one. Two probes find the usual ones:
// - by value: an integer or enum field set, in a constant expression, to a value
//   that needs every bit of its type reads back different when the field is
//   narrower (`int level : 3`). Needs every field type to be default
//   constructible in a constant expression (numbers, enums, std::string, ...).
// - by size: a struct of scalar fields smaller than those fields laid out in
//   order (`bool a : 1, b : 1` share a byte; so does a packed struct).
// Missed, and still failing inside the field-name code below: a bit-field as
// wide as its type, or a `bool : 1` beside fields of a non-literal type.

// A value of integer or enum type F that needs all of F's bits (no bit-field
// narrower than F holds it), or a value-initialized F.
template <class F>
constexpr F field_probe(bool full) {
  if constexpr (std::is_enum_v<F>) {
    if (full) return static_cast<F>(field_probe<std::underlying_type_t<F>>(true));
  } else if constexpr (std::is_integral_v<F> && !std::is_same_v<F, bool>) {
    if (full) return std::numeric_limits<F>::max();
  }
  return F{};
}

template <std::size_t K>
struct NthField {
  template <class... F>
  constexpr auto operator()(auto, const F&... fields) const {
    return std::get<K>(std::forward_as_tuple(fields...));
  }
};

// Whether field K of T (field types Types) drops bits of a full-width value.
// (Dropping them is the point. Which field gets the value is a function
// argument, `set` (== K), so that the compilers do not fold the initializer
// while instantiating this and warn about the overflow; a diagnostic pragma
// would not do: GCC drops it when kiln.hpp is in a precompiled header.)
template <class T, class Types, std::size_t K, std::size_t... I>
constexpr bool drops_bits(std::size_t set, std::index_sequence<I...>) {
  using FK = std::remove_cv_t<std::tuple_element_t<K, Types>>;
  const T t{field_probe<std::remove_cv_t<std::tuple_element_t<I, Types>>>(I == set)...};
  return with_fields<sizeof...(I)>(t, NthField<K>{}) != field_probe<FK>(true);
}

template <class T, class Types, std::size_t K>
constexpr bool narrower_field() {
  using FK = std::remove_cv_t<std::tuple_element_t<K, Types>>;
  using All = std::make_index_sequence<std::tuple_size_v<Types>>;
  if constexpr (!std::is_enum_v<FK> && !(std::is_integral_v<FK> && !std::is_same_v<FK, bool>)) {
    return false;
  } else if constexpr (requires { typename std::bool_constant<drops_bits<T, Types, K>(K, All{})>; }) {
    return drops_bits<T, Types, K>(K, All{});
  } else {
    return false;  // not constant-evaluable (a field type that is not literal)
  }
}

// The size of a struct of the fields Types laid out in order (Itanium ABI).
template <class... F>
constexpr std::size_t laid_out_size() {
  std::size_t end = 0, align = 1;
  ((end = (end + alignof(F) - 1) / alignof(F) * alignof(F) + sizeof(F),
    align = alignof(F) > align ? alignof(F) : align), ...);
  return (end + align - 1) / align * align;
}

template <class T, class Types>
struct BitFieldProbe;
template <class T, class... F>
struct BitFieldProbe<T, std::tuple<F...>> {
  static constexpr bool kProbeable =
      ((!std::is_reference_v<F> && std::is_default_constructible_v<std::remove_cv_t<F>>) && ...);
  static constexpr bool found() {
    if constexpr (!kProbeable) {
      return false;
    } else {
      if constexpr ((std::is_scalar_v<F> && ...)) {
        if (sizeof(T) < laid_out_size<F...>()) return true;
      }
      return [&]<std::size_t... K>(std::index_sequence<K...>) {
        return (narrower_field<T, std::tuple<F...>, K>() || ...);
      }(std::index_sequence_for<F...>());
    }
  }
};

// Whether T is an aggregate with a bit-field either probe finds (above).
template <class T>
constexpr bool bit_field() {
  if constexpr (!plain_aggregate<T>()) {
    return false;
  } else {
    constexpr std::size_t n = count_initializers<T>();
    if constexpr (n == 0 || n > kMaxAggregateFields || count_bases<T, n>() != 0 ||
                  c_array_field<T>()) {
      return false;
    } else {
      return BitFieldProbe<T, FieldTypes<T>>::found();
    }
  }
}

// ---- field names ----
template <class T>
struct FieldPointer {
  const T* p;
};
// Storage for a T that is never constructed: only the addresses of its fields
// are taken, at compile time. (A union with a constexpr constructor, so that it
// is constant-initialized whatever T is; an object that is only declared would
// not do for types without linkage.)
template <class T>
union FakeStorage {
  char unused;
  T value;
  constexpr FakeStorage() : unused() {}
  constexpr ~FakeStorage() {}
};
template <class T>
inline const FakeStorage<T> kFakeStorage{};

template <auto P>
consteval std::string_view spelled_pointer() {
  return __PRETTY_FUNCTION__;
}

template <class T>
consteval auto field_pointers() {
  return with_fields<kFieldCount<T>>(kFakeStorage<T>.value, [](auto, const auto&... fields) {
    return std::tuple{FieldPointer<std::remove_cvref_t<decltype(fields)>>{&fields}...};
  });
}

// The last identifier before the end of the pointer's spelling: GCC writes
// "...{(& kFakeStorage<Cfg>.FakeStorage<Cfg>::value.Cfg::scale)}]", Clang
// "...{&kFakeStorage.value.scale}]".
consteval std::string_view member_name(std::string_view s) {
  std::size_t end = s.rfind('}');
  if (end == std::string_view::npos) return {};
  while (end > 0 && (s[end - 1] == ')' || s[end - 1] == ' ')) --end;
  std::size_t begin = end;
  auto ident = [](char c) {
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9');
  };
  while (begin > 0 && ident(s[begin - 1])) --begin;
  return s.substr(begin, end - begin);
}

// Names of a visible aggregate's fields (no reference or bit-field members).
template <class T>
consteval std::array<std::string_view, kFieldCount<T>> field_names() {
  constexpr auto pointers = field_pointers<T>();
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    return std::array<std::string_view, sizeof...(I)>{
        member_name(spelled_pointer<std::get<I>(pointers)>())...};
  }(std::make_index_sequence<kFieldCount<T>>());
}

}  // namespace kiln::detail
