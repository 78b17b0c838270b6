// How each C++ type is walked as a pytree: the flatten (type -> TreeDef records
// + leaves) and unflatten (TreeDef + arrays -> type) rules for registered
// structs, standard containers, kiln::Tree, Array and static leaves. Internal
// to tree.hpp; flatten is on the jit's per-call path, so it only appends small
// records.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "kiln/runtime/aggregate.hpp"
#include "kiln/runtime/array.hpp"
#include "kiln/runtime/static.hpp"
#include "kiln/runtime/tree_def.hpp"
#include "kiln/runtime/tree_dynamic.hpp"

namespace kiln {

// ---- registration diagnostics (names show the offending type) ----
template <class T>
struct kiln_module_requires_default_constructor {
  static_assert(
      std::is_default_constructible_v<T>,
      "kiln: a KILN_MODULE struct must be default-constructible: unflatten "
      "default-constructs it and then assigns its fields. Add a default "
      "constructor (e.g. `T() = default;`) next to your other constructors");
};
template <class T>
struct kiln_module_registration_names_another_type {
  static_assert(
      detail::kAlwaysFalse<T>,
      "kiln: this struct's KILN_MODULE registration belongs to another type "
      "(a struct derived from a registered module inherits the base's "
      "registration); add KILN_MODULE(Derived, fields...) to the derived "
      "struct");
};
// Registered and Fields: how many fields KILN_MODULE names and the struct has.
template <class T, std::size_t Registered, std::size_t Fields>
struct kiln_module_leaves_out_fields {
  static_assert(
      detail::kAlwaysFalse<T>,
      "kiln: KILN_MODULE(Type, fields...) must name every field of the struct: "
      "it names fewer than the struct has (the two counts are the template "
      "arguments of kiln_module_leaves_out_fields), and a field left out is not "
      "part of the tree, so grad, filter_jit and unflatten would lose it. Name it "
      "in KILN_MODULE, or, if it is deliberately not part of the tree, in "
      "KILN_NOT_IN_TREE(field, ...)");
};

// A class kiln cannot count the fields of (it has constructors, private
// fields or bases): its size is larger than every field KILN_MODULE and
// KILN_NOT_IN_TREE name could take, padding included, so a field is left out.
template <class T, std::size_t SizeOfT, std::size_t MostTheNamedFieldsTake>
struct kiln_module_leaves_out_fields_of_a_class {
  static_assert(
      detail::kAlwaysFalse<T>,
      "kiln: KILN_MODULE(Type, fields...) must name every field of the class: "
      "the class is larger (first number in kiln_module_leaves_out_fields_of_a_class) "
      "than the fields it names can take (second number), so a field is left "
      "out, and grad, filter_jit and unflatten would lose it (and filter_jit's "
      "key would not see it change). Name it in KILN_MODULE, or, if it is "
      "deliberately not part of the tree, in KILN_NOT_IN_TREE(field, ...)");
};

namespace detail {

template <class T>
using ModuleSelf = std::remove_pointer_t<decltype(T::kiln_module_self())>;

// KILN_MODULE's kiln_fields() hands a visitor over the fields, not a
// std::tuple: the tuple (and std::tie's instantiation) is built here, only for
// the modules a program flattens, not for every registered struct it includes
// (~0.3 s of an empty program's compile with kiln.hpp's own modules).
struct TieFields {
  template <class... F>
  std::tuple<F&...> operator()(F&... f) const noexcept {
    return {f...};
  }
};
template <class T>
auto fields_of(T& v) noexcept {
  return v.kiln_fields()(TieFields{});
}
template <class T>
using FieldsOf = decltype(fields_of(std::declval<const T&>()));

constexpr bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}
constexpr std::size_t count_names(std::string_view s) {
  std::size_t n = 1;
  for (char c : s) n += c == ',' ? 1 : 0;
  return n;
}
template <std::size_t N>
constexpr std::array<std::string_view, N> split_field_names(
    std::string_view s) {
  std::array<std::string_view, N> out{};
  for (std::size_t i = 0; i < N; ++i) {
    const std::size_t comma = s.find(',');
    std::string_view part = s.substr(0, comma);
    while (!part.empty() && is_space(part.front())) part.remove_prefix(1);
    while (!part.empty() && is_space(part.back())) part.remove_suffix(1);
    out[i] = part;
    s = comma == std::string_view::npos ? std::string_view()
                                        : s.substr(comma + 1);
  }
  return out;
}

template <class T>
struct IsVector : std::bool_constant<kIs<T, std::vector>> {};
template <class T>
struct IsStdArray : IsStdArrayType<T> {};
template <class T>
struct IsTupleLike : std::false_type {};
template <class... Ts>
struct IsTupleLike<std::tuple<Ts...>> : std::true_type {};
template <class A, class B>
struct IsTupleLike<std::pair<A, B>> : std::true_type {};
template <class T>
struct IsOptional : std::bool_constant<kIs<T, std::optional>> {};
template <class T>
struct IsStringMap : std::false_type {};
template <class V, class C, class A>
struct IsStringMap<std::map<std::string, V, C, A>> : std::true_type {};


template <class T>
struct TupleOfImpl {
  using type = T;
};
template <class A, class B>
struct TupleOfImpl<std::pair<A, B>> {
  using type = std::tuple<A, B>;
};
template <class T>
using TupleOf = typename TupleOfImpl<T>::type;

// Whether the tree can hold T (the soft form of check_tree_type below).
template <class T>
constexpr bool tree_type_ok();

// check_tree_type of each type in a std::tuple.
template <class Fields>
struct FieldChecks;

template <class T>
constexpr bool tree_type_ok() {
  if constexpr (std::is_same_v<T, Array> || std::is_same_v<T, Tree> ||
                std::is_same_v<T, StaticValue> || Module<T>) {
    return true;
  } else if constexpr (IsVector<T>::value || IsStdArray<T>::value || IsOptional<T>::value) {
    return tree_type_ok<typename T::value_type>();
  } else if constexpr (IsStringMap<T>::value) {
    return tree_type_ok<typename T::mapped_type>();
  } else if constexpr (IsTupleLike<T>::value) {
    return FieldChecks<TupleOf<T>>::kOk;
  } else {
    return StaticLeaf<T>;
  }
}

// Diagnoses a field type that the tree cannot hold (a refused static leaf)
// where the struct is checked, before anything else about the struct.
// Registered structs inside are checked when they themselves are walked.
template <class T>
constexpr void check_tree_type() {
  if constexpr (std::is_same_v<T, Array> || std::is_same_v<T, Tree> ||
                std::is_same_v<T, StaticValue> || Module<T>) {
    return;
  } else if constexpr (IsVector<T>::value || IsStdArray<T>::value || IsOptional<T>::value) {
    check_tree_type<typename T::value_type>();
  } else if constexpr (IsStringMap<T>::value) {
    check_tree_type<typename T::mapped_type>();
  } else if constexpr (IsTupleLike<T>::value) {
    FieldChecks<TupleOf<T>>::run();
  } else {
    check_static_leaf<T>();
  }
}

template <class... F>
struct FieldChecks<std::tuple<F...>> {
  static constexpr bool kOk = (tree_type_ok<std::remove_cvref_t<F>>() && ...);
  static constexpr void run() { (check_tree_type<std::remove_cvref_t<F>>(), ...); }
};

// Fields marked KILN_NOT_IN_TREE (a std::tuple of references; empty if none).
template <class T>
auto untracked_fields_of(const T& v) {
  if constexpr (requires { v.kiln_untracked_fields(); }) {
    return v.kiln_untracked_fields()(TieFields{});
  } else {
    return std::tuple<>();
  }
}
template <class T>
using UntrackedOf = decltype(untracked_fields_of(std::declval<const T&>()));

// The most bytes an object whose fields are these types can take, in any
// order: each field starts at the next multiple of the largest alignment at
// worst. A larger class holds something else.
template <class Tuple>
struct MostBytes;
template <class... F>
struct MostBytes<std::tuple<F...>> {
  static constexpr std::size_t kAlign = std::max({std::size_t{1}, alignof(std::remove_cvref_t<F>)...});
  static constexpr std::size_t up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }
  template <class T>
  static constexpr std::size_t of() {
    const std::size_t align = std::max(kAlign, alignof(T));
    // A polymorphic class's vtable pointer comes first.
    const std::size_t vptr = std::is_polymorphic_v<T> ? up(sizeof(void*), align) : 0;
    return up(vptr + (std::size_t{0} + ... + up(sizeof(std::remove_cvref_t<F>), align)), align);
  }
};

// Every compile-time check of a registered struct, in the order that puts the
// most useful message first: its fields' types, its registration, the fields
// the registration leaves out (aggregates: counted; other classes: by size, so a
// left-out field that fits in the named fields' padding is not seen), default
// construction. Evaluated through kModuleChecked (see kStaticChecked).
template <class T>
constexpr void check_module() {
  using Fields = FieldsOf<T>;
  constexpr std::size_t kRegistered = std::tuple_size_v<Fields>;
  // What the named fields (KILN_MODULE and KILN_NOT_IN_TREE) can take at most.
  constexpr std::size_t kMostNamedBytes =
      MostBytes<decltype(std::tuple_cat(std::declval<Fields>(),
                                        std::declval<UntrackedOf<T>>()))>::template of<T>();
  FieldChecks<Fields>::run();
  // A refused field type comes first and alone: it is often why the struct is
  // not default-constructible (a lambda with captures), and the other checks
  // would be diagnosed before it otherwise.
  if constexpr (!FieldChecks<Fields>::kOk) {
    return;
  } else if constexpr (!std::is_same_v<ModuleSelf<T>, T>) {
    (void)sizeof(kiln_module_registration_names_another_type<T>);
  } else if constexpr (visible_aggregate<T>() &&
                       kFieldCount<T> > kRegistered + std::tuple_size_v<UntrackedOf<T>>) {
    (void)sizeof(kiln_module_leaves_out_fields<T, kRegistered, kFieldCount<T>>);
  } else if constexpr (!visible_aggregate<T>() && sizeof(T) > kMostNamedBytes) {
    (void)sizeof(kiln_module_leaves_out_fields_of_a_class<T, sizeof(T), kMostNamedBytes>);
  } else if constexpr (!std::is_default_constructible_v<T>) {
    (void)sizeof(kiln_module_requires_default_constructor<T>);
  }
}

template <class T>
inline constexpr bool kModuleChecked = (check_module<T>(), true);

template <class T>
constexpr auto member_paths_of() -> decltype(NodeInfo::member_paths) {
  if constexpr (requires { &T::kiln_member_paths; }) {
    return &T::kiln_member_paths;
  } else {
    return nullptr;
  }
}

template <class T>
const NodeInfo& struct_info() {
  constexpr std::size_t kN = std::tuple_size_v<FieldsOf<T>>;
  static_assert(count_names(T::kiln_module_field_names()) == kN,
                "kiln: KILN_MODULE(Type, fields...) takes plain field names");
  static constexpr std::array<std::string_view, kN> kNames =
      split_field_names<kN>(T::kiln_module_field_names());
  static const std::string kTypeName = type_display_name(typeid(T));
  static const NodeInfo info{T::kiln_module_name(), kNames, &typeid(T), kTypeName,
                             typeid(T).hash_code(), requires { T::kiln_frozen; },
                             member_paths_of<T>()};
  return info;
}

template <class T>
struct IsDefaultVector : std::false_type {};
template <class V>
struct IsDefaultVector<std::vector<V>> : std::true_type {};
template <class T>
struct IsDefaultMap : std::false_type {};
template <class V>
struct IsDefaultMap<std::map<std::string, V>> : std::true_type {};

// How a type is named in structure messages ("std::pair<Array, Array>"): the
// standard containers spelled without their default allocators and
// comparators, kiln's types without "kiln::".
template <class T>
std::string tree_type_name() {
  if constexpr (std::is_same_v<T, Array> || std::is_same_v<T, Tree> ||
                std::is_same_v<T, StaticValue>) {
    return std::string(std::is_same_v<T, Array>  ? "Array"
                       : std::is_same_v<T, Tree> ? "Tree"
                                                 : "StaticValue");
  } else if constexpr (IsDefaultVector<T>::value) {
    return "std::vector<" + tree_type_name<typename T::value_type>() + ">";
  } else if constexpr (IsStdArray<T>::value) {
    return "std::array<" + tree_type_name<typename T::value_type>() + ", " +
           std::to_string(std::tuple_size_v<T>) + ">";
  } else if constexpr (IsOptional<T>::value) {
    return "std::optional<" + tree_type_name<typename T::value_type>() + ">";
  } else if constexpr (IsDefaultMap<T>::value) {
    return "std::map<std::string, " + tree_type_name<typename T::mapped_type>() + ">";
  } else if constexpr (IsTupleLike<T>::value) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      std::string out = kIs<T, std::pair> ? "std::pair<" : "std::tuple<";
      ((out += (I == 0 ? "" : ", ") + tree_type_name<std::tuple_element_t<I, T>>()), ...);
      return out + ">";
    }(std::make_index_sequence<std::tuple_size_v<T>>());
  } else {
    return type_display_name(typeid(T));
  }
}

// The NodeInfo of a standard container type (list, tuple, dict, optional).
template <class T>
const NodeInfo& container_info() {
  static const std::string kTypeName = tree_type_name<T>();
  static const NodeInfo info{kTypeName, {}, &typeid(T), kTypeName, typeid(T).hash_code()};
  return info;
}

// Appends pre-order records to a fresh TreeDefData and, when asked, the leaves.
class DefBuilder;
void flatten_tree(const Tree& t, DefBuilder& b);

class DefBuilder {
 public:
  // Reserves what the previous flatten on this thread needed: a program flattens
  // the same structures over and over, so this is usually one allocation each.
  explicit DefBuilder(std::vector<Array>* leaves)
      : d_(std::make_shared<TreeDefData>()), leaves_(leaves) {
    d_->nodes.reserve(hint().nodes);
    d_->statics.reserve(hint().statics);
    if (leaves_ != nullptr) leaves_->reserve(hint().leaves);
  }

  std::size_t open(NodeKind kind, std::size_t arity,
                   const NodeInfo* info = nullptr) {
    const std::size_t idx = d_->nodes.size();
    d_->nodes.push_back(DefNode{
        kind, static_cast<std::uint32_t>(arity), 1,
        kind == NodeKind::kDict ? static_cast<std::uint32_t>(d_->keys.size())
                                : 0u,
        info});
    return idx;
  }
  void close(std::size_t idx) {
    d_->nodes[idx].size = static_cast<std::uint32_t>(d_->nodes.size() - idx);
  }
  void key(const std::string& k) { d_->keys.push_back(k); }
  void array(const Array& a) {
    ++d_->num_slots;
    if (a.is_null()) {
      d_->nodes.push_back(DefNode{NodeKind::kNone});
      return;
    }
    ++d_->num_leaves;
    d_->nodes.push_back(DefNode{NodeKind::kArray});
    if (leaves_ != nullptr) leaves_->push_back(a);
  }
  template <class T>
  void static_value(const T& v) {
    static_leaf(StaticValue::of(v));
  }
  void tree(const Tree& t) { flatten_tree(t, *this); }
  void static_leaf(StaticValue v) {
    d_->nodes.push_back(
        DefNode{NodeKind::kStatic, 0, 1,
                static_cast<std::uint32_t>(d_->statics.size())});
    d_->statics.push_back(std::move(v));
  }
  TreeDef finish();  // hashes the records

 private:
  struct SizeHint {
    std::size_t nodes = 16;
    std::size_t leaves = 8;
    std::size_t statics = 2;
  };
  static SizeHint& hint() {
    thread_local SizeHint h;
    return h;
  }

  std::shared_ptr<TreeDefData> d_;
  std::vector<Array>* leaves_;
};

// Walks a TreeDef while rebuilding a value. In per-slot mode `values` has one
// entry per array slot (None slots included, nulls allowed anywhere); otherwise
// it has one per array leaf and None slots read as null.
struct Reader {
  const TreeDef& def;
  std::span<const Array> values;
  bool per_slot = false;
  std::size_t node = 0;
  std::size_t value = 0;
};

[[noreturn]] void throw_unflatten_mismatch(const Reader& r,
                                           const std::type_info& want);
Tree read_tree(Reader& r);

// Walks `v` in pre-order and reports each record to `b`: DefBuilder builds a
// TreeDef; the jit's matcher (runtime/tree_match.hpp) compares against one.
template <class T, class B>
void flatten_into(const T& v, B& b) {
  if constexpr (std::is_same_v<T, Array>) {
    b.array(v);
  } else if constexpr (std::is_same_v<T, Tree>) {
    b.tree(v);
  } else if constexpr (std::is_same_v<T, StaticValue>) {
    b.static_leaf(v);  // already type-erased (a jit or Tree static)
  } else if constexpr (Module<T>) {
    static_assert(kModuleChecked<T>);
    if constexpr (std::is_same_v<ModuleSelf<T>, T>) {
      const auto fields = fields_of(v);
      using Fields = decltype(fields);
      const std::size_t idx = b.open(
          NodeKind::kStruct, std::tuple_size_v<Fields>, &struct_info<T>());
      [&]<std::size_t... I>(std::index_sequence<I...>) {
        (flatten_into<std::remove_cvref_t<std::tuple_element_t<I, Fields>>, B>(
             std::get<I>(fields), b),
         ...);
      }
      (std::make_index_sequence<std::tuple_size_v<Fields>>());
      b.close(idx);
    }
  } else if constexpr (IsVector<T>::value || IsStdArray<T>::value) {
    const std::size_t idx = b.open(NodeKind::kList, v.size(), &container_info<T>());
    for (const auto& e : v) flatten_into<typename T::value_type, B>(e, b);
    b.close(idx);
  } else if constexpr (IsTupleLike<T>::value) {
    const std::size_t idx =
        b.open(NodeKind::kTuple, std::tuple_size_v<T>, &container_info<T>());
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (flatten_into<std::tuple_element_t<I, T>, B>(std::get<I>(v), b), ...);
    }
    (std::make_index_sequence<std::tuple_size_v<T>>());
    b.close(idx);
  } else if constexpr (IsOptional<T>::value) {
    const std::size_t idx =
        b.open(NodeKind::kOptional, v.has_value() ? 1 : 0, &container_info<T>());
    if (v.has_value()) flatten_into<typename T::value_type, B>(*v, b);
    b.close(idx);
  } else if constexpr (IsStringMap<T>::value) {
    const std::size_t idx = b.open(NodeKind::kDict, v.size(), &container_info<T>());
    for (const auto& kv : v) b.key(kv.first);
    for (const auto& kv : v)
      flatten_into<typename T::mapped_type, B>(kv.second, b);
    b.close(idx);
  } else {
    static_assert(kStaticChecked<T>);
    if constexpr (StaticLeaf<T>) b.static_value(v);
  }
}

template <class T>
T unflatten_from(Reader& r);

template <class T, std::size_t... I>
void assign_fields(T& out, Reader& r, std::index_sequence<I...>) {
  auto fields = fields_of(out);
  // The comma fold reads the fields left to right, in pre-order.
  ((std::get<I>(fields) = unflatten_from<
        std::remove_cvref_t<std::tuple_element_t<I, decltype(fields)>>>(r)),
   ...);
}

template <class T>
T unflatten_from(Reader& r) {
  const DefNode n = r.def.nodes()[r.node];
  if constexpr (std::is_same_v<T, Array>) {
    if (n.kind != NodeKind::kArray && n.kind != NodeKind::kNone) {
      throw_unflatten_mismatch(r, typeid(T));
    }
    ++r.node;
    if (r.per_slot || n.kind == NodeKind::kArray) return r.values[r.value++];
    return Array();
  } else if constexpr (std::is_same_v<T, Tree>) {
    return read_tree(r);
  } else if constexpr (std::is_same_v<T, StaticValue>) {
    if (n.kind != NodeKind::kStatic) throw_unflatten_mismatch(r, typeid(T));
    ++r.node;
    return r.def.static_values()[n.aux];
  } else if constexpr (Module<T>) {
    static_assert(kModuleChecked<T>);
    if (n.kind != NodeKind::kStruct ||
        !same_type(n.info, &struct_info<T>())) {
      throw_unflatten_mismatch(r, typeid(T));
    }
    ++r.node;
    T out{};
    assign_fields(out, r,
                  std::make_index_sequence<std::tuple_size_v<FieldsOf<T>>>());
    return out;
  } else if constexpr (IsVector<T>::value) {
    if (n.kind != NodeKind::kList) throw_unflatten_mismatch(r, typeid(T));
    ++r.node;
    T out;
    out.reserve(n.arity);
    for (std::uint32_t i = 0; i < n.arity; ++i) {
      out.push_back(unflatten_from<typename T::value_type>(r));
    }
    return out;
  } else if constexpr (IsStdArray<T>::value) {
    if (n.kind != NodeKind::kList || n.arity != std::tuple_size_v<T>) {
      throw_unflatten_mismatch(r, typeid(T));
    }
    ++r.node;
    // Braced initialisation evaluates left to right, in pre-order.
    return [&r]<std::size_t... I>(std::index_sequence<I...>) {
      return T{((void)I, unflatten_from<typename T::value_type>(r))...};
    }
    (std::make_index_sequence<std::tuple_size_v<T>>());
  } else if constexpr (IsTupleLike<T>::value) {
    if (n.kind != NodeKind::kTuple || n.arity != std::tuple_size_v<T>) {
      throw_unflatten_mismatch(r, typeid(T));
    }
    ++r.node;
    return [&r]<std::size_t... I>(std::index_sequence<I...>) {
      return T{unflatten_from<std::tuple_element_t<I, T>>(r)...};
    }
    (std::make_index_sequence<std::tuple_size_v<T>>());
  } else if constexpr (IsOptional<T>::value) {
    if (n.kind != NodeKind::kOptional) throw_unflatten_mismatch(r, typeid(T));
    ++r.node;
    if (n.arity == 0) return T();
    return T(std::in_place, unflatten_from<typename T::value_type>(r));
  } else if constexpr (IsStringMap<T>::value) {
    if (n.kind != NodeKind::kDict) throw_unflatten_mismatch(r, typeid(T));
    ++r.node;
    T out;
    const auto& keys = r.def.data().keys;
    for (std::uint32_t i = 0; i < n.arity; ++i) {
      out.emplace_hint(out.end(), keys[n.aux + i],
                       unflatten_from<typename T::mapped_type>(r));
    }
    return out;
  } else {
    static_assert(kStaticChecked<T>);
    if constexpr (StaticLeaf<T>) {
      const T* p = n.kind == NodeKind::kStatic
                       ? r.def.static_values()[n.aux].template get_if<T>()
                       : nullptr;
      if (p == nullptr) throw_unflatten_mismatch(r, typeid(T));
      ++r.node;
      return *p;
    } else {
      throw_unflatten_mismatch(r, typeid(T));  // refused above, at compile time
    }
  }
}

}  // namespace detail
}  // namespace kiln
