// How kiln compares, hashes and prints a static leaf: the one definition of
// "the same static value" behind filter_jit's cache key (static_kind.hpp says
// which types may be statics at all).
//
//   - Floating point compares by bits: 0.0 and -0.0 are different keys (x / s
//     tells them apart), and a NaN equals the same NaN (so a NaN setting does
//     not retrace on every call).
//   - Containers, pairs, tuples, optionals, variants, Static<T> and aggregates
//     compare element by element (field by field) with this same rule, so a
//     double inside a struct or a vector follows it too. Unordered containers
//     compare as multisets (and hash order-independently): equal contents are
//     one key whatever order their insertion history lists them in. An aggregate's own ==
//     and hash are required (a static says it is a value) but kiln keys on its
//     fields, which can only make it retrace more, never hit a stale entry.
//   - Types declared with KILN_STATIC_VALUE, numbers, enums and strings use
//     their own == and hash.
//   - Function pointers compare by address; stateless function objects by type.
#pragma once

#include <bit>
#include <chrono>
#include <complex>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <string>
#include <string_view>
#include <typeinfo>
#include <variant>

#include "absl/hash/hash.h"
#include "kiln/runtime/static_kind.hpp"

namespace kiln::detail {

// Out-of-line helpers (static.cpp).
std::string demangle(const char* mangled);
// The demangled type without "(anonymous namespace)::" (noise in messages).
std::string type_display_name(const std::type_info& t);
// Symbol name of the function at `address` ("relu", "ns::gelu"), without its
// parameter list; the hex address when no symbol can be found.
std::string function_name(std::uintptr_t address);
// "ns::square::{lambda(kiln::Array const&)#1}" -> "ns::square" for a lambda
// that initialises a variable; other type names are returned unchanged.
std::string closure_name(std::string demangled);
std::string format_double(double v);
std::string format_float(float v);
std::string quote(std::string_view s);
std::string stream_to_string(const void* v, void (*write)(std::ostream&, const void*));

// The value bytes of a long double (the 80-bit format's 10; not its padding).
struct LongDoubleBits {
  std::uint64_t lo = 0, hi = 0;
  friend bool operator==(const LongDoubleBits&, const LongDoubleBits&) = default;
  template <class H>
  friend H AbslHashValue(H h, const LongDoubleBits& b) {
    return H::combine(std::move(h), b.lo, b.hi);
  }
};

// Bits of a floating-point value.
template <class F>
auto float_bits(F v) {
  if constexpr (sizeof(F) == 4) {
    return std::bit_cast<std::uint32_t>(v);
  } else if constexpr (sizeof(F) == 8) {
    return std::bit_cast<std::uint64_t>(v);
  } else {
    LongDoubleBits out;
    constexpr std::size_t kValueBytes =
        std::numeric_limits<F>::digits == 64 ? 10 : sizeof(LongDoubleBits);
    std::memcpy(&out, &v, kValueBytes < sizeof(F) ? kValueBytes : sizeof(F));
    return out;
  }
}

template <class T>
bool static_equal(const T& a, const T& b);
template <class T>
std::size_t static_hash(const T& v);

template <class Tuple, std::size_t... I>
bool tuple_equal(const Tuple& a, const Tuple& b, std::index_sequence<I...>) {
  return (static_equal(std::get<I>(a), std::get<I>(b)) && ...);
}
template <class Tuple, std::size_t... I>
std::size_t tuple_hash(const Tuple& v, std::index_sequence<I...>) {
  std::size_t h = sizeof...(I);
  ((h = absl::HashOf(h, static_hash(std::get<I>(v)))), ...);
  return h;
}

// Alternative by index (a variant may hold one type twice: variant<double, double>).
template <class V, std::size_t... I>
bool variant_equal(const V& a, const V& b, std::index_sequence<I...>) {
  bool equal = false;
  (void)((a.index() == I && (equal = static_equal(std::get<I>(a), std::get<I>(b)), true)) || ...);
  return equal;
}

template <class T>
bool static_equal(const T& a, const T& b) {
  constexpr StaticKind k = static_kind<T>();
  if constexpr (k == StaticKind::kFloat) {
    return float_bits(a) == float_bits(b);
  } else if constexpr (kIs<T, std::complex> && k == StaticKind::kComposite) {
    return float_bits(a.real()) == float_bits(b.real()) &&
           float_bits(a.imag()) == float_bits(b.imag());
  } else if constexpr (IsDuration<T>::value && k == StaticKind::kComposite) {
    return static_equal(a.count(), b.count());
  } else if constexpr (k == StaticKind::kStateless) {
    return true;  // same type, no state
  } else if constexpr (k != StaticKind::kComposite) {
    return a == b;
  } else if constexpr (kIs<T, Static>) {
    return static_equal(a.value, b.value);
  } else if constexpr (kIs<T, std::pair>) {
    return static_equal(a.first, b.first) && static_equal(a.second, b.second);
  } else if constexpr (kIs<T, std::tuple>) {
    return tuple_equal(a, b, std::make_index_sequence<std::tuple_size_v<T>>());
  } else if constexpr (kIs<T, std::optional>) {
    return a.has_value() == b.has_value() && (!a.has_value() || static_equal(*a, *b));
  } else if constexpr (kIs<T, std::variant>) {
    return a.index() == b.index() &&
           variant_equal(a, b, std::make_index_sequence<std::variant_size_v<T>>());
  } else if constexpr (kIsUnorderedContainer<T>) {
    using E = std::remove_cv_t<typename T::value_type>;
    if (a.size() != b.size()) return false;
    // Each element occurs as often in b as in a (quadratic: statics are small).
    for (const auto& x : a) {
      std::size_t in_a = 0, in_b = 0;
      for (const auto& y : a) in_a += static_equal<E>(x, y);
      for (const auto& y : b) in_b += static_equal<E>(x, y);
      if (in_a != in_b) return false;
    }
    return true;
  } else if constexpr (kIsOwningContainer<T>) {
    auto i = a.begin();
    auto j = b.begin();
    for (; i != a.end() && j != b.end(); ++i, ++j) {
      if (!static_equal<std::remove_cv_t<typename T::value_type>>(*i, *j)) return false;
    }
    return i == a.end() && j == b.end();
  } else {  // a visible aggregate
    return with_fields<kFieldCount<T>>(a, [&](auto, const auto&... fa) {
      return with_fields<kFieldCount<T>>(b, [&](auto, const auto&... fb) {
        return (static_equal(fa, fb) && ...);
      });
    });
  }
}

template <class T>
std::size_t static_hash(const T& v) {
  constexpr StaticKind k = static_kind<T>();
  if constexpr (k == StaticKind::kFloat) {
    return absl::HashOf(float_bits(v));
  } else if constexpr (kIs<T, std::complex> && k == StaticKind::kComposite) {
    return absl::HashOf(float_bits(v.real()), float_bits(v.imag()));
  } else if constexpr (IsDuration<T>::value && k == StaticKind::kComposite) {
    return static_hash(v.count());
  } else if constexpr (k == StaticKind::kFunctionPointer) {
    return absl::HashOf(reinterpret_cast<std::uintptr_t>(v));
  } else if constexpr (k == StaticKind::kStateless) {
    return typeid(T).hash_code();
  } else if constexpr (k != StaticKind::kComposite) {
    return absl::Hash<T>{}(v);
  } else if constexpr (kIs<T, Static>) {
    return static_hash(v.value);
  } else if constexpr (kIs<T, std::pair>) {
    return absl::HashOf(static_hash(v.first), static_hash(v.second));
  } else if constexpr (kIs<T, std::tuple>) {
    return tuple_hash(v, std::make_index_sequence<std::tuple_size_v<T>>());
  } else if constexpr (kIs<T, std::optional>) {
    return v.has_value() ? absl::HashOf(true, static_hash(*v)) : absl::HashOf(false);
  } else if constexpr (kIs<T, std::variant>) {
    return absl::HashOf(v.index(), std::visit([](const auto& x) { return static_hash(x); }, v));
  } else if constexpr (kIsUnorderedContainer<T>) {
    std::size_t sum = 0;  // commutative: the order of iteration does not matter
    for (const auto& e : v) sum += static_hash<std::remove_cv_t<typename T::value_type>>(e);
    return absl::HashOf(v.size(), sum);
  } else if constexpr (kIsOwningContainer<T>) {
    std::size_t h = absl::HashOf(std::size_t{0});
    for (const auto& e : v) h = absl::HashOf(h, static_hash<std::remove_cv_t<typename T::value_type>>(e));
    return h;
  } else {  // a visible aggregate
    return with_fields<kFieldCount<T>>(v, [](auto, const auto&... f) {
      return tuple_hash(std::forward_as_tuple(f...), std::index_sequence_for<decltype(f)...>());
    });
  }
}

// ---- printing (retrace explanations, tree printing) ----
template <class T>
concept Streamable = requires(std::ostream& os, const T& v) { os << v; };

template <class T>
std::string value_repr(const T& v);

template <class Range>
std::string join_reprs(const Range& r, std::string_view open, std::string_view close) {
  std::string out(open);
  bool first = true;
  for (const auto& e : r) {
    if (!first) out += ", ";
    first = false;
    out += value_repr(e);
  }
  out += close;
  return out;
}

template <class T>
std::string value_repr(const T& v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? "true" : "false";
  } else if constexpr (std::is_same_v<T, double> || std::is_same_v<T, long double>) {
    return format_double(static_cast<double>(v));
  } else if constexpr (std::is_same_v<T, float>) {
    return format_float(v);
  } else if constexpr (std::is_integral_v<T>) {
    return std::to_string(v);
  } else if constexpr (std::is_enum_v<T>) {
    return type_display_name(typeid(T)) + "(" + std::to_string(static_cast<std::int64_t>(v)) +
           ")";
  } else if constexpr (std::is_same_v<T, std::string>) {
    return quote(v);
  } else if constexpr (kIs<T, std::complex>) {
    return "(" + value_repr(v.real()) + (std::signbit(v.imag()) ? " - " : " + ") +
           value_repr(std::abs(v.imag())) + "i)";
  } else if constexpr (IsDuration<T>::value) {
    using P = typename T::period;
    const char* unit = std::is_same_v<P, std::ratio<1>>     ? "s"
                       : std::is_same_v<P, std::milli>      ? "ms"
                       : std::is_same_v<P, std::micro>      ? "us"
                       : std::is_same_v<P, std::nano>       ? "ns"
                       : std::is_same_v<P, std::ratio<60>>  ? "min"
                       : std::is_same_v<P, std::ratio<3600>> ? "h"
                                                            : nullptr;
    if (unit != nullptr) return value_repr(v.count()) + unit;
    return type_display_name(typeid(T)) + "(" + value_repr(v.count()) + ")";
  } else if constexpr (kIs<T, Static>) {
    return value_repr(v.value);
  } else if constexpr (Streamable<T>) {
    return stream_to_string(&v, [](std::ostream& os, const void* p) {
      os << *static_cast<const T*>(p);
    });
  } else if constexpr (kIs<T, std::pair>) {
    return "(" + value_repr(v.first) + ", " + value_repr(v.second) + ")";
  } else if constexpr (kIs<T, std::tuple>) {
    return std::apply(
        [](const auto&... e) {
          std::string out = "(";
          ((out += value_repr(e), out += ", "), ...);
          if (out.size() > 1) out.resize(out.size() - 2);
          return out + ")";
        },
        v);
  } else if constexpr (kIs<T, std::optional>) {
    return v.has_value() ? value_repr(*v) : std::string("nullopt");
  } else if constexpr (kIs<T, std::variant>) {
    return std::visit([](const auto& x) { return value_repr(x); }, v);
  } else if constexpr (kIsOwningContainer<T>) {
    return join_reprs(v, "[", "]");
  } else if constexpr (static_kind<T>() == StaticKind::kComposite && visible_aggregate<T>()) {
    // Cfg{k=2, scale=0.5}
    static constexpr auto kNames = field_names<T>();
    std::string out = type_display_name(typeid(T)) + "{";
    std::size_t i = 0;
    for_each_field(v, [&](const auto& f) {
      if (i > 0) out += ", ";
      out += kNames[i++];
      out += "=";
      out += value_repr(f);
    });
    return out + "}";
  } else {
    return "<" + type_display_name(typeid(T)) + ">";
  }
}

}  // namespace kiln::detail
