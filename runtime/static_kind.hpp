// Which C++ types may be static pytree leaves, decided at compile time: the one
// place that says what a static is (docs/MODELS.md, "Static leaves").
//
// A static leaf is part of filter_jit's cache key, so it must be a *value*: kiln
// keeps its own copy in the key, and nothing the caller holds afterwards may
// reach what that copy refers to. Accepted:
//   - numbers, bool, enums, std::basic_string (standard traits), std::monostate,
//     std::bitset, std::complex and std::chrono::duration (floats by bits);
//   - standard containers, pairs, tuples, optionals and variants of accepted
//     types (inside Static<T>, or where the tree does not walk them as nodes);
//   - aggregates (plain structs) with operator== and AbslHashValue whose every
//     field is accepted: kiln sees their fields and checks them;
//   - a class kiln cannot see into (constructors, private fields) only when it
//     declares itself a value with KILN_STATIC_VALUE(Type) (its == and hash
//     must cover everything it holds, and it must own all of it);
//   - function pointers and stateless function objects (captureless lambdas),
//     which compare by identity, not by the wrapper's address;
//   - Static<T> of an accepted T.
// Refused with a compile-time error that says what to pass instead: raw and
// smart pointers, C arrays and string literals, std::any, references and
// std::reference_wrapper, views (string_view,
// span, ranges views), iterators, std::function, lambdas with captures, structs
// that hold arrays (register them with KILN_MODULE), and types without == and
// a hash.
#pragma once

#include <array>
#include <any>
#include <bitset>
#include <chrono>
#include <complex>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <forward_list>
#include <functional>
#include <iterator>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <ranges>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

#include "absl/hash/hash.h"
#include "kiln/runtime/aggregate.hpp"

// Declares, inside a class, that the class is a static value: it owns
// everything it holds (no pointers, references or views into the caller's
// memory) and its operator== and AbslHashValue compare all of it. Needed only
// for classes kiln cannot see into (not aggregates); an aggregate is checked
// field by field instead.
#define KILN_STATIC_VALUE(Type) using kiln_static_value = Type

namespace kiln {

class Array;
class Tree;
template <class T>
struct Static;

namespace detail {

template <class T>
inline constexpr bool kAlwaysFalse = false;

template <class T>
inline constexpr bool kHasHash = std::is_invocable_v<absl::Hash<T>, const T&>;
template <class T>
inline constexpr bool kHasEquality = std::equality_comparable<T>;

template <class T, template <class...> class Template>
struct IsSpecialization : std::false_type {};
template <template <class...> class Template, class... A>
struct IsSpecialization<Template<A...>, Template> : std::true_type {};
template <class T, template <class...> class Template>
inline constexpr bool kIs = IsSpecialization<T, Template>::value;

template <class T>
struct IsStdArrayType : std::false_type {};
template <class T, std::size_t N>
struct IsStdArrayType<std::array<T, N>> : std::true_type {};
template <class T>
struct IsBitset : std::false_type {};
template <std::size_t N>
struct IsBitset<std::bitset<N>> : std::true_type {};
template <class T>
struct IsStdString : std::false_type {};
template <class C, class A>
struct IsStdString<std::basic_string<C, std::char_traits<C>, A>> : std::true_type {};
template <class T>
struct IsDuration : std::false_type {};
template <class R, class P>
struct IsDuration<std::chrono::duration<R, P>> : std::true_type {};
template <class T>
struct IsSpan : std::false_type {};
template <class T, std::size_t N>
struct IsSpan<std::span<T, N>> : std::true_type {};

template <class T>
inline constexpr bool kIsFunctionPointer =
    std::is_pointer_v<T> && std::is_function_v<std::remove_pointer_t<T>>;

// A function object whose operator() is not a template (functors, lambdas).
template <class T>
concept HasCallOperator = std::is_class_v<T> && requires { &T::operator(); };

// The compiler's spelling of T, at compile time.
template <class T>
consteval std::string_view spelled_type() {
  return __PRETTY_FUNCTION__;
}
// A closure type: GCC spells it "<lambda(...)>", Clang "(lambda at file:line)".
// (Spelling is the only portable test; a generic lambda has no &T::operator().)
template <class T>
inline constexpr bool kIsClosure =
    std::is_class_v<T> && (spelled_type<T>().find("<lambda") != std::string_view::npos ||
                           spelled_type<T>().find("(lambda at") != std::string_view::npos);

// Declared a value with KILN_STATIC_VALUE(T) (T's own, not inherited).
template <class T>
concept DeclaredValue = requires { typename T::kiln_static_value; } &&
                        std::is_same_v<typename T::kiln_static_value, T>;

// Standard containers that own their elements (compared element by element).
template <class T>
inline constexpr bool kIsOwningContainer =
    kIs<T, std::vector> || IsStdArrayType<T>::value || kIs<T, std::deque> ||
    kIs<T, std::list> || kIs<T, std::forward_list> || kIs<T, std::set> ||
    kIs<T, std::multiset> || kIs<T, std::map> || kIs<T, std::multimap> ||
    kIs<T, std::unordered_set> || kIs<T, std::unordered_multiset> ||
    kIs<T, std::unordered_map> || kIs<T, std::unordered_multimap>;

// The owning containers whose iteration order depends on their insertion history:
// two equal ones may list their elements in different orders.
template <class T>
inline constexpr bool kIsUnorderedContainer =
    kIs<T, std::unordered_set> || kIs<T, std::unordered_multiset> ||
    kIs<T, std::unordered_map> || kIs<T, std::unordered_multimap>;

// Registered with KILN_MODULE (the tree walks it; see tree_traits.hpp).
template <class T>
concept Module = requires { T::kiln_module_self(); };

// Whether T holds arrays or modules somewhere a tree would reach them: a plain
// struct like that forgot KILN_MODULE.
template <class T>
constexpr bool holds_arrays();

enum class StaticKind : std::uint8_t {
  kValue,            // compared with its own == and hash (numbers, strings, ...)
  kFloat,            // float/double/long double: compared by bits
  kComposite,        // containers, tuples, aggregates, Static<T>: by element
  kFunctionPointer,  // identity = the function's address
  kStateless,        // empty class without a hash: identity = its type
  // Refusals, each with its own diagnostic:
  kRejectStdFunction,
  kRejectCapturingLambda,
  kRejectCallable,
  kRejectPointer,
  kRejectCArray,
  kRejectBitField,     // a struct with a bit-field (aggregate.hpp's bit_field)
  kRejectSmartPointer,
  kRejectReference,
  kRejectView,
  kRejectIterator,
  kRejectArray,        // an Array inside a static value
  kRejectAny,          // std::any: no ==, and its contents' type is not known
  kRejectUnregistered, // a struct holding arrays or modules, no KILN_MODULE
  kRejectOpaque,       // hash and ==, but kiln cannot see its fields
  kRejectMissing,      // lacks == and/or a hash
  kRejectPart,         // an element or field is refused (diagnosed there)
  kCount,              // not a kind: the number of kinds (tests enumerate them)
};

template <class T>
constexpr StaticKind static_kind();

template <class T>
constexpr bool accepted() {
  return static_kind<T>() <= StaticKind::kStateless;
}

template <class... T>
constexpr StaticKind all_of(StaticKind ok) {
  return (accepted<std::remove_cv_t<T>>() && ...) ? ok : StaticKind::kRejectPart;
}

// Fields of an aggregate or elements of a tuple: none a reference, all accepted.
template <class Tuple>
struct TupleParts;
template <class... E>
struct TupleParts<std::tuple<E...>> {
  static constexpr bool kNoReferences = (!std::is_reference_v<E> && ...);
  static constexpr StaticKind kKind = all_of<std::remove_cvref_t<E>...>(StaticKind::kComposite);
};
template <class T>
struct VariantParts;
template <class... E>
struct VariantParts<std::variant<E...>> {
  using Tuple = std::tuple<E...>;
  static constexpr StaticKind kKind = all_of<E...>(StaticKind::kComposite);
};

template <class Tuple>
constexpr StaticKind parts_kind() {
  if constexpr (!TupleParts<Tuple>::kNoReferences) return StaticKind::kRejectReference;
  else return TupleParts<Tuple>::kKind;
}

// parts_kind of a visible aggregate's fields; kComposite for any other type.
// (Its own function: a constexpr-if condition instantiates every operand of
// &&, and FieldTypes<T> of a type that is not a visible aggregate is an error.)
template <class T>
constexpr StaticKind aggregate_parts_kind() {
  if constexpr (visible_aggregate<T>() && !std::is_empty_v<T>) {
    return parts_kind<FieldTypes<T>>();
  } else {
    return StaticKind::kComposite;
  }
}

template <class T>
constexpr StaticKind static_kind() {
  if constexpr (kIs<T, std::function>) {
    return StaticKind::kRejectStdFunction;
  } else if constexpr (kIs<T, Static>) {
    using U = typename T::value_type;
    return accepted<U>() ? StaticKind::kComposite : static_kind<U>();
  } else if constexpr (std::is_floating_point_v<T>) {
    return StaticKind::kFloat;
  } else if constexpr (std::is_arithmetic_v<T> || std::is_enum_v<T> ||
                       IsStdString<T>::value || std::is_same_v<T, std::monostate> ||
                       IsBitset<T>::value) {
    return StaticKind::kValue;
  } else if constexpr (kIs<T, std::complex>) {
    return StaticKind::kComposite;  // real and imaginary parts, by bits
  } else if constexpr (IsDuration<T>::value) {
    return all_of<typename T::rep>(StaticKind::kComposite);  // its count()
  } else if constexpr (std::is_same_v<T, std::any>) {
    return StaticKind::kRejectAny;
  } else if constexpr (kIsFunctionPointer<T>) {
    return StaticKind::kFunctionPointer;
  } else if constexpr (std::is_pointer_v<T> || std::is_member_pointer_v<T> ||
                       std::is_null_pointer_v<T>) {
    return StaticKind::kRejectPointer;
  } else if constexpr (std::is_array_v<T>) {
    return StaticKind::kRejectCArray;
  } else if constexpr (std::is_reference_v<T> || kIs<T, std::reference_wrapper>) {
    return StaticKind::kRejectReference;
  } else if constexpr (kIs<T, std::shared_ptr> || kIs<T, std::unique_ptr> ||
                       kIs<T, std::weak_ptr>) {
    return StaticKind::kRejectSmartPointer;
  } else if constexpr (kIs<T, std::basic_string_view> || IsSpan<T>::value ||
                       std::ranges::view<T>) {
    return StaticKind::kRejectView;
  } else if constexpr (std::input_or_output_iterator<T>) {
    return StaticKind::kRejectIterator;
  } else if constexpr (std::is_same_v<T, Array>) {
    return StaticKind::kRejectArray;
  } else if constexpr (kIs<T, std::pair>) {
    return all_of<typename T::first_type, typename T::second_type>(StaticKind::kComposite);
  } else if constexpr (kIs<T, std::tuple>) {
    return parts_kind<T>();
  } else if constexpr (kIs<T, std::variant>) {
    return VariantParts<T>::kKind;
  } else if constexpr (kIs<T, std::optional>) {
    return all_of<typename T::value_type>(StaticKind::kComposite);
  } else if constexpr (kIsOwningContainer<T>) {
    return all_of<typename T::value_type>(StaticKind::kComposite);
  } else if constexpr (DeclaredValue<T>) {
    return kHasHash<T> && kHasEquality<T> ? StaticKind::kValue : StaticKind::kRejectMissing;
  } else if constexpr (kIsClosure<T>) {
    return std::is_empty_v<T> ? StaticKind::kStateless : StaticKind::kRejectCapturingLambda;
  } else if constexpr (c_array_field<T>()) {
    return StaticKind::kRejectCArray;  // a C array field
  } else if constexpr (bit_field<T>()) {
    return StaticKind::kRejectBitField;
  } else if constexpr (visible_aggregate<T>() && !Module<T> && holds_arrays<T>()) {
    return StaticKind::kRejectUnregistered;
  } else if constexpr (aggregate_parts_kind<T>() != StaticKind::kComposite) {
    return aggregate_parts_kind<T>();  // a reference or refused field comes first
  } else if constexpr (kHasHash<T> && kHasEquality<T>) {
    if constexpr (visible_aggregate<T>()) return StaticKind::kComposite;
    else if constexpr (std::is_empty_v<T>) return StaticKind::kValue;
    else return StaticKind::kRejectOpaque;
  } else if constexpr (std::is_class_v<T> && std::is_empty_v<T> && !kHasHash<T> &&
                       std::is_copy_constructible_v<T>) {
    // No state, so every instance does the same thing: the type is the
    // identity. (An empty type with a hash but no == is a half-done contract
    // and falls through to the refusal below.)
    return StaticKind::kStateless;
  } else if constexpr (HasCallOperator<T>) {
    return StaticKind::kRejectCallable;
  } else {
    return StaticKind::kRejectMissing;
  }
}

template <class Tuple>
struct AnyHoldsArrays;
template <class... E>
struct AnyHoldsArrays<std::tuple<E...>> {
  static constexpr bool value = (holds_arrays<std::remove_cvref_t<E>>() || ...);
};

template <class T>
constexpr bool holds_arrays() {
  if constexpr (std::is_same_v<T, Array> || std::is_same_v<T, Tree> || Module<T>) {
    return true;
  } else if constexpr (kIs<T, std::map>) {
    return holds_arrays<typename T::mapped_type>();
  } else if constexpr (kIs<T, std::vector> || IsStdArrayType<T>::value ||
                       kIs<T, std::optional>) {
    return holds_arrays<typename T::value_type>();
  } else if constexpr (kIs<T, std::pair>) {
    return holds_arrays<typename T::first_type>() || holds_arrays<typename T::second_type>();
  } else if constexpr (kIs<T, std::tuple>) {
    return AnyHoldsArrays<T>::value;
  } else if constexpr (std::is_class_v<T> && !kIsClosure<T> && visible_aggregate<T>()) {
    return AnyHoldsArrays<FieldTypes<T>>::value;
  } else {
    return false;
  }
}

}  // namespace detail

// True when T can be a static pytree leaf (a soft check; see check_static_leaf).
template <class T>
concept StaticLeaf = detail::accepted<std::remove_cvref_t<T>>();

// ---- compile-time diagnostics: instantiated only for a refused type, whose
// name the compiler prints in the "In instantiation of" line above the error ----
template <class T>
struct kiln_static_leaf_rejects_std_function {
  static_assert(detail::kAlwaysFalse<T>,
                "kiln: a std::function cannot be a static leaf (a module field or a "
                "non-array argument of filter_jit): it has no == or hash, so a rebuilt "
                "module would recompile every time. Use a function pointer, a lambda "
                "without captures, or a function object with operator== and AbslHashValue");
};
template <class T>
struct kiln_static_leaf_rejects_capturing_lambda {
  static_assert(detail::kAlwaysFalse<T>,
                "kiln: a lambda with captures cannot be a static leaf: its captured "
                "values cannot be compared, so kiln could not tell when they change. "
                "Use a lambda without captures or a function pointer and pass the "
                "captured values as fields or arguments (numbers as static values, "
                "tensors as Arrays), or write a struct with operator() whose fields "
                "are those values, with operator== and AbslHashValue");
};
template <class T>
struct kiln_static_leaf_rejects_stateful_callable {
  static_assert(detail::kAlwaysFalse<T>,
                "kiln: this function object has state but no operator== and "
                "AbslHashValue, so it cannot be a static leaf. Add both (comparing "
                "every field), or use a function pointer or a lambda without captures");
};
template <class T>
struct kiln_static_leaf_rejects_pointer {
  static_assert(detail::kAlwaysFalse<T>,
                "kiln: a data pointer cannot be a static leaf: kiln would key on the "
                "address while the caller can change what it points to. Store the "
                "value itself (std::string for text), or pass the data as an Array");
};
template <class T>
struct kiln_static_leaf_rejects_c_array {
  static_assert(detail::kAlwaysFalse<T>,
                "kiln: a C array (or a string literal) cannot be a static leaf: it "
                "decays to a pointer to memory the caller owns. Pass std::string for "
                "text, std::array or std::vector for numbers, or an Array");
};
template <class T>
struct kiln_static_leaf_rejects_bit_field {
  static_assert(detail::kAlwaysFalse<T>,
                "kiln: a struct with a bit-field (or a packed layout) cannot be a static "
                "leaf: kiln compares and prints a static struct field by field, and C++ "
                "cannot name a bit-field. Make the field a plain integer (or bool), or "
                "declare the struct a value with KILN_STATIC_VALUE(T) and give it == and "
                "a hash");
};
template <class T>
struct kiln_static_leaf_rejects_smart_pointer {
  static_assert(detail::kAlwaysFalse<T>,
                "kiln: a smart pointer (shared_ptr, unique_ptr, weak_ptr) cannot be a "
                "static leaf: the caller can change the object it shares after kiln "
                "cached a program for it. Pass the object by value (a copy; "
                "kiln::Static<T> of a value type), or pass its data as an Array");
};
template <class T>
struct kiln_static_leaf_rejects_reference {
  static_assert(detail::kAlwaysFalse<T>,
                "kiln: a reference (std::ref, std::reference_wrapper, or a reference "
                "field) cannot be a static leaf: the caller can change the referred "
                "value after kiln cached a program for it. Pass the value itself (a "
                "copy), or pass the data as an Array");
};
template <class T>
struct kiln_static_leaf_rejects_view {
  static_assert(detail::kAlwaysFalse<T>,
                "kiln: a view (std::string_view, std::span, a ranges view) cannot be a "
                "static leaf: it refers to memory the caller can change. Copy it into "
                "an owning value (std::string, std::vector), or pass the data as an Array");
};
template <class T>
struct kiln_static_leaf_rejects_iterator {
  static_assert(detail::kAlwaysFalse<T>,
                "kiln: an iterator cannot be a static leaf: it refers to memory the "
                "caller can change. Pass the value it points to, or an index");
};
template <class T>
struct kiln_static_leaf_rejects_array_inside_a_value {
  static_assert(detail::kAlwaysFalse<T>,
                "kiln: an Array inside a static value (Static<T>, a set, a map with "
                "non-string keys, a variant) cannot be keyed by value. Hold arrays in "
                "KILN_MODULE structs, std::vector, std::array, std::tuple, std::optional "
                "or std::map<std::string, T>, which the tree walks");
};
template <class T>
struct kiln_static_leaf_rejects_std_any {
  static_assert(detail::kAlwaysFalse<T>,
                "kiln: a std::any cannot be a static leaf: it has no ==, and kiln "
                "cannot see what it holds to key on it. Pass the value itself (or a "
                "std::variant of the types it may hold)");
};
template <class T>
struct kiln_struct_holds_arrays_but_is_not_registered {
  static_assert(detail::kAlwaysFalse<T>,
                "kiln: this struct holds arrays or modules but is not registered: add "
                "KILN_MODULE(Type, every field...) inside it so that the tree walks its "
                "fields");
};
template <class T>
struct kiln_static_leaf_cannot_see_fields {
  static_assert(detail::kAlwaysFalse<T>,
                "kiln: this class has operator== and a hash, but kiln cannot see its "
                "fields (it is not an aggregate, or a base class holds fields) to check "
                "that it holds values only. "
                "If it owns everything it holds (no pointers, references or views) and "
                "its == and hash cover all of it, add KILN_STATIC_VALUE(Type) inside "
                "it; or make it a plain struct; or register it with KILN_MODULE if it "
                "holds arrays");
};
template <class T>
struct kiln_static_leaf_requires_hash_and_equality {
  static_assert(detail::kHasEquality<T> || detail::kHasHash<T>,
                "kiln: this type is neither an Array, a container, nor a KILN_MODULE "
                "struct, so it is a static leaf, and a static leaf needs operator== and "
                "AbslHashValue; it has neither. If it holds arrays, register it with "
                "KILN_MODULE(Type, fields...); if it is a setting, add `bool "
                "operator==(const Type&) const = default;` and `template <class H> "
                "friend H AbslHashValue(H h, const Type& v)`");
  static_assert(!detail::kHasHash<T> || detail::kHasEquality<T>,
                "kiln: this static leaf type has AbslHashValue but no operator==: kiln "
                "compares static values with == after the hash (equal hashes are not "
                "equal values). Add `bool operator==(const Type&) const = default;`");
  static_assert(!detail::kHasEquality<T> || detail::kHasHash<T>,
                "kiln: this static leaf type has operator== but no AbslHashValue: kiln "
                "looks programs up by hash. Add `template <class H> friend H "
                "AbslHashValue(H h, const Type& v) { return H::combine(std::move(h), "
                "v.field, ...); }`");
};

namespace detail {

template <class T>
constexpr void check_static_leaf();

// The first refused part of a refused composite (its field or element type is
// in this function's template arguments, which the compiler prints).
template <class Whole, class... Parts>
constexpr void check_parts() {
  bool done = false;
  ((done || accepted<std::remove_cvref_t<Parts>>()
        ? void()
        : (done = true, check_static_leaf<std::remove_cvref_t<Parts>>())),
   ...);
}
template <class Whole, class Tuple>
struct PartsOf;
template <class Whole, class... E>
struct PartsOf<Whole, std::tuple<E...>> {
  static constexpr void check() { check_parts<Whole, E...>(); }
};

// Instantiates the diagnostic of a refused static leaf type; no-op otherwise.
template <class T>
constexpr void check_static_leaf() {
  constexpr StaticKind k = static_kind<T>();
  if constexpr (k == StaticKind::kRejectPart || (k != StaticKind::kComposite && kIs<T, Static>)) {
    if constexpr (kIs<T, Static>) {
      check_static_leaf<typename T::value_type>();
    } else if constexpr (kIs<T, std::pair>) {
      check_parts<T, typename T::first_type, typename T::second_type>();
    } else if constexpr (kIs<T, std::tuple>) {
      PartsOf<T, T>::check();
    } else if constexpr (kIs<T, std::variant>) {
      PartsOf<T, typename VariantParts<T>::Tuple>::check();
    } else if constexpr (visible_aggregate<T>() && !kIsOwningContainer<T>) {
      PartsOf<T, FieldTypes<T>>::check();
    } else {
      check_parts<T, typename T::value_type>();
    }
  } else if constexpr (k == StaticKind::kRejectStdFunction) {
    (void)sizeof(kiln_static_leaf_rejects_std_function<T>);
  } else if constexpr (k == StaticKind::kRejectCapturingLambda) {
    (void)sizeof(kiln_static_leaf_rejects_capturing_lambda<T>);
  } else if constexpr (k == StaticKind::kRejectCallable) {
    (void)sizeof(kiln_static_leaf_rejects_stateful_callable<T>);
  } else if constexpr (k == StaticKind::kRejectPointer) {
    (void)sizeof(kiln_static_leaf_rejects_pointer<T>);
  } else if constexpr (k == StaticKind::kRejectCArray) {
    (void)sizeof(kiln_static_leaf_rejects_c_array<T>);
  } else if constexpr (k == StaticKind::kRejectBitField) {
    (void)sizeof(kiln_static_leaf_rejects_bit_field<T>);
  } else if constexpr (k == StaticKind::kRejectSmartPointer) {
    (void)sizeof(kiln_static_leaf_rejects_smart_pointer<T>);
  } else if constexpr (k == StaticKind::kRejectReference) {
    (void)sizeof(kiln_static_leaf_rejects_reference<T>);
  } else if constexpr (k == StaticKind::kRejectView) {
    (void)sizeof(kiln_static_leaf_rejects_view<T>);
  } else if constexpr (k == StaticKind::kRejectIterator) {
    (void)sizeof(kiln_static_leaf_rejects_iterator<T>);
  } else if constexpr (k == StaticKind::kRejectArray) {
    (void)sizeof(kiln_static_leaf_rejects_array_inside_a_value<T>);
  } else if constexpr (k == StaticKind::kRejectAny) {
    (void)sizeof(kiln_static_leaf_rejects_std_any<T>);
  } else if constexpr (k == StaticKind::kRejectUnregistered) {
    (void)sizeof(kiln_struct_holds_arrays_but_is_not_registered<T>);
  } else if constexpr (k == StaticKind::kRejectOpaque) {
    (void)sizeof(kiln_static_leaf_cannot_see_fields<T>);
  } else if constexpr (k == StaticKind::kRejectMissing) {
    (void)sizeof(kiln_static_leaf_requires_hash_and_equality<T>);
  }
}

// Evaluated (not merely instantiated) where it is used, so that the
// compiler reports a refused static's diagnostic right there, before any
// later error the refused type causes (GCC defers the bodies of constexpr
// functions that are only called to the end of the file otherwise).
template <class T>
inline constexpr bool kStaticChecked = (check_static_leaf<T>(), true);

}  // namespace detail

}  // namespace kiln
