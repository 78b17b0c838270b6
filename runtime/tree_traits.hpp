// How each C++ type is walked as a pytree: the flatten (type -> TreeDef records
// + leaves) and unflatten (TreeDef + arrays -> type) rules for registered
// structs, standard containers, kiln::Tree, Array and static leaves. Internal
// to tree.hpp; flatten is on the jit's per-call path, so it only appends small
// records.
#pragma once

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
      "part of the tree, so grad, filter_jit and unflatten would lose it");
};

namespace detail {

template <class T>
using ModuleSelf = std::remove_pointer_t<decltype(T::kiln_module_self())>;

template <class T>
using FieldsOf = decltype(std::declval<const T&>().kiln_fields());

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

// Every compile-time check of a registered struct, in the order that puts the
// most useful message first: its fields' types, its registration, the fields
// the registration leaves out (aggregates only: kiln can count their fields),
// default construction. Evaluated through kModuleChecked (see kStaticChecked).
template <class T>
constexpr void check_module() {
  using Fields = FieldsOf<T>;
  constexpr std::size_t kRegistered = std::tuple_size_v<Fields>;
  FieldChecks<Fields>::run();
  // A refused field type comes first and alone: it is often why the struct is
  // not default-constructible (a lambda with captures), and the other checks
  // would be diagnosed before it otherwise.
  if constexpr (!FieldChecks<Fields>::kOk) {
    return;
  } else if constexpr (!std::is_same_v<ModuleSelf<T>, T>) {
    (void)sizeof(kiln_module_registration_names_another_type<T>);
  } else if constexpr (visible_aggregate<T>() && kFieldCount<T> > kRegistered) {
    (void)sizeof(kiln_module_leaves_out_fields<T, kRegistered, kFieldCount<T>>);
  } else if constexpr (!std::is_default_constructible_v<T>) {
    (void)sizeof(kiln_module_requires_default_constructor<T>);
  }
}

template <class T>
inline constexpr bool kModuleChecked = (check_module<T>(), true);

template <class T>
constexpr auto member_paths_of() -> decltype(StructInfo::member_paths) {
  if constexpr (requires { &T::kiln_member_paths; }) {
    return &T::kiln_member_paths;
  } else {
    return nullptr;
  }
}

template <class T>
const StructInfo& struct_info() {
  constexpr std::size_t kN = std::tuple_size_v<FieldsOf<T>>;
  static_assert(count_names(T::kiln_module_field_names()) == kN,
                "kiln: KILN_MODULE(Type, fields...) takes plain field names");
  static constexpr std::array<std::string_view, kN> kNames =
      split_field_names<kN>(T::kiln_module_field_names());
  static const std::string kTypeName = type_display_name(typeid(T));
  static const StructInfo info{T::kiln_module_name(), kNames, &typeid(T), kTypeName,
                               typeid(T).hash_code(), requires { T::kiln_frozen; },
                               member_paths_of<T>()};
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
                   const StructInfo* info = nullptr) {
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
  void empty() { d_->nodes.push_back(DefNode{NodeKind::kEmpty}); }
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
      const auto fields = v.kiln_fields();
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
    const std::size_t idx = b.open(NodeKind::kList, v.size());
    for (const auto& e : v) flatten_into<typename T::value_type, B>(e, b);
    b.close(idx);
  } else if constexpr (IsTupleLike<T>::value) {
    const std::size_t idx = b.open(NodeKind::kTuple, std::tuple_size_v<T>);
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (flatten_into<std::tuple_element_t<I, T>, B>(std::get<I>(v), b), ...);
    }
    (std::make_index_sequence<std::tuple_size_v<T>>());
    b.close(idx);
  } else if constexpr (IsOptional<T>::value) {
    if (v.has_value()) {
      flatten_into<typename T::value_type, B>(*v, b);
    } else {
      b.empty();
    }
  } else if constexpr (IsStringMap<T>::value) {
    const std::size_t idx = b.open(NodeKind::kDict, v.size());
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
  auto fields = out.kiln_fields();
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
        !same_struct(n.info, &struct_info<T>())) {
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
    if (n.kind == NodeKind::kEmpty) {
      ++r.node;
      return T();
    }
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
