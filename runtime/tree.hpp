// Pytrees: typed C++ structs registered with one KILN_MODULE line, standard
// containers and kiln::Tree, with Arrays (null = None) and static values as
// leaves. Utilities (namespace kiln::tree): flatten/unflatten, leaves,
// structure, paths, n-ary map, partition/combine, tree_at, and structure diffs
// (tree_def.hpp).
//
//   struct MLP {
//     std::vector<Linear> layers;
//     Array (*activation)(const Array&);  // static leaf: identity = function
//     KILN_MODULE(MLP, layers, activation);
//   };
#pragma once

#include <array>
#include <concepts>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/runtime/array.hpp"
#include "kiln/runtime/static.hpp"
#include "kiln/runtime/tree_def.hpp"
#include "kiln/runtime/tree_dynamic.hpp"
#include "kiln/runtime/tree_traits.hpp"

// Registers the enclosing struct as a pytree node with the given fields, in
// order. The struct must be default-constructible (unflatten builds it field by
// field). Works in local structs too (only static member functions, no static
// data).
#define KILN_MODULE(Type, ...)                                           \
  static constexpr std::string_view kiln_module_name() { return #Type; } \
  static constexpr std::string_view kiln_module_field_names() {          \
    return #__VA_ARGS__;                                                 \
  }                                                                      \
  auto kiln_fields() {                                                   \
    return [this](auto&& kiln_f) -> decltype(auto) {                     \
      return kiln_f(__VA_ARGS__);                                        \
    };                                                                   \
  }                                                                      \
  auto kiln_fields() const {                                             \
    return [this](auto&& kiln_f) -> decltype(auto) {                     \
      return kiln_f(__VA_ARGS__);                                        \
    };                                                                   \
  }                                                                      \
  static Type* kiln_module_self() /* declared only: read by decltype */

// Inside a KILN_MODULE struct: fields that are deliberately not part of its
// tree (a cache, a handle to a logger). grad, filter_jit and unflatten
// default-construct them, and filter_jit's key does not see them, so a
// changed value does not recompile. Without it, a field left out of
// KILN_MODULE is a compile error (see check_module in tree_traits.hpp).
//   struct Net { Array w; Stats stats; KILN_MODULE(Net, w); KILN_NOT_IN_TREE(stats); };
#define KILN_NOT_IN_TREE(...)                                                 \
  auto kiln_untracked_fields() const {                                  \
    return [this](auto&& kiln_f) -> decltype(auto) {                    \
      return kiln_f(__VA_ARGS__);                                       \
    };                                                                  \
  }                                                                     \
  static_assert(true, "")

namespace kiln {

// Marks a subtree as frozen: grad and value_and_grad give None for every array
// inside it (it still flattens, maps and jit-compiles like any other subtree).
//   struct Model { Frozen<Linear> embed; Linear head; KILN_MODULE(...); };
template <class T>
struct Frozen {
  static constexpr bool kiln_frozen = true;
  T value{};
  KILN_MODULE(Frozen, value);

  const T& operator*() const { return value; }
  T& operator*() { return value; }
  const T* operator->() const { return &value; }
  T* operator->() { return &value; }
};

// Filters for tree::partition (any callable bool(const Array&) works too).
inline bool is_array(const Array& a) { return !a.is_null(); }
// Floating-point arrays: what grad differentiates.
inline bool is_inexact_array(const Array& a) {
  return !a.is_null() && is_inexact(a.dtype());
}

namespace detail {
// Out-of-line parts of the templates below (tree.cpp).
void check_leaves(const TreeDef& def, std::span<const Array> leaves);
std::vector<Array> expand_slots(const TreeDef& def,
                                std::span<const Array> leaves);
[[noreturn]] void throw_structure_mismatch(std::string_view op,
                                           std::size_t index,
                                           const TreeDef& expected,
                                           const TreeDef& got);
std::vector<Array> combine_slots(const TreeDef& a,
                                 std::span<const Array> a_leaves,
                                 const TreeDef& b,
                                 std::span<const Array> b_leaves);
std::size_t slot_of_path(std::string_view op, const TreeDef& def,
                         std::string_view path);

template <class>
using ArrayRefFor = const Array&;

template <class T>
T unflatten_slots(const TreeDef& def, std::span<const Array> slots) {
  Reader r{def, slots, true};
  return unflatten_from<T>(r);
}
}  // namespace detail

namespace tree {

struct Flat {
  std::vector<Array> leaves;  // non-null arrays, pre-order
  TreeDef def;
};

template <class T>
Flat flatten(const T& t) {
  Flat out;
  detail::DefBuilder b(&out.leaves);
  detail::flatten_into<T>(t, b);
  out.def = b.finish();
  return out;
}

template <class T>
TreeDef structure(const T& t) {
  detail::DefBuilder b(nullptr);
  detail::flatten_into<T>(t, b);
  return b.finish();
}

template <class T>
std::vector<Array> leaves(const T& t) {
  return flatten(t).leaves;
}

// Rebuilds a T from a structure and its leaves (one per array, None excluded);
// statics come from the structure. Throws TreeError (with the path) when the
// structure does not describe a T or the leaves do not fit it.
template <class T>
T unflatten(const TreeDef& def, std::span<const Array> leaves) {
  detail::check_leaves(def, leaves);
  detail::Reader r{def, leaves, false};
  return detail::unflatten_from<T>(r);
}

template <class T>
requires(!std::is_same_v<T, TreeDef>) std::vector<std::string> paths(
    const T& t) {
  return paths(structure(t));
}

// The parameter count of a model: the elements of all its array leaves (None
// leaves and statics count nothing).
template <class T>
std::int64_t count_elements(const T& t) {
  std::int64_t n = 0;
  for (const Array& a : leaves(t)) n += a.size();
  return n;
}

// A table of the array leaves, one line each (path, dtype, shape, elements;
// "(frozen)" inside kiln::Frozen), then the totals:
//   layers[0].weight  f32  (784, 128)  100352
//   ...
//   6 arrays, 101770 elements, 397.5 KiB
std::string summary(const TreeDef& def, std::span<const Array> leaves);
template <class T>
requires(!std::is_same_v<T, TreeDef>) std::string summary(const T& t) {
  Flat flat = flatten(t);
  return summary(flat.def, flat.leaves);
}
template <class T>
requires(!std::is_same_v<T, TreeDef>) std::vector<SlotPath> slot_paths(
    const T& t) {
  return slot_paths(structure(t));
}

// f(leaf, leaf_of_rest...) -> Array on each array leaf (None stays None,
// statics come from `t`); every tree in `rest` must have the same structure as
// `t`, else TreeError listing the differences. f may return a null Array
// (None).
template <class F, class T, class... Rest>
T map(F&& f, const T& t, const Rest&... rest) {
  static_assert(
      std::is_invocable_r_v<Array, F&, const Array&,
                            detail::ArrayRefFor<Rest>...>,
      "kiln::tree::map: f must be callable as f(const Array&, ...) -> Array "
      "with one array per tree");
  Flat first = flatten(t);
  std::array<Flat, sizeof...(Rest)> others{flatten(rest)...};
  for (std::size_t i = 0; i < others.size(); ++i) {
    if (!(others[i].def == first.def)) {
      detail::throw_structure_mismatch("tree.map", i + 1, first.def,
                                       others[i].def);
    }
  }
  std::vector<Array> slots;
  slots.reserve(first.def.num_slots());
  std::size_t leaf = 0;
  for (const detail::DefNode& n : first.def.nodes()) {
    if (n.kind == NodeKind::kArray) {
      slots.push_back([&]<std::size_t... I>(std::index_sequence<I...>) {
        return Array(f(first.leaves[leaf], others[I].leaves[leaf]...));
      }(std::make_index_sequence<sizeof...(Rest)>()));
      ++leaf;
    } else if (n.kind == NodeKind::kNone) {
      slots.emplace_back();
    }
  }
  return detail::unflatten_slots<T>(first.def, slots);
}

// Splits `t` in two trees of the same type: arrays for which filter(array) is
// true go to the first, the others to the second; the other side holds None
// there. Statics stay in both (a typed static cannot be None).
template <class T, class Filter>
std::pair<T, T> partition(const T& t, Filter&& filter) {
  static_assert(std::is_invocable_r_v<bool, Filter&, const Array&>,
                "kiln::tree::partition: the filter must be callable as "
                "bool(const Array&), e.g. kiln::is_inexact_array");
  Flat flat = flatten(t);
  std::vector<Array> yes, no;
  yes.reserve(flat.def.num_slots());
  no.reserve(flat.def.num_slots());
  std::size_t leaf = 0;
  for (const detail::DefNode& n : flat.def.nodes()) {
    if (n.kind == NodeKind::kArray) {
      const Array& a = flat.leaves[leaf++];
      const bool keep = static_cast<bool>(filter(a));
      yes.push_back(keep ? a : Array());
      no.push_back(keep ? Array() : a);
    } else if (n.kind == NodeKind::kNone) {
      yes.emplace_back();
      no.emplace_back();
    }
  }
  return {detail::unflatten_slots<T>(flat.def, yes),
          detail::unflatten_slots<T>(flat.def, no)};
}

// Inverse of partition: at each array slot takes the non-null array of either
// tree. The trees must have the same structure up to None-vs-array; TreeError
// naming the paths where both hold an array.
template <class T>
T combine(const T& a, const T& b) {
  Flat fa = flatten(a);
  Flat fb = flatten(b);
  return detail::unflatten_slots<T>(
      fa.def, detail::combine_slots(fa.def, fa.leaves, fb.def, fb.leaves));
}
template <class T, class... Rest>
requires(sizeof...(Rest) > 0 && (std::is_same_v<T, Rest> && ...)) T
    combine(const T& a, const T& b, const Rest&... rest) {
  return combine(combine(a, b), rest...);
}

// Functional update: a copy of `t` with where(copy) replaced, e.g.
// tree_at([](MLP& m) -> Array& { return m.layers[1].bias; }, model, new_bias).
template <class Where, class T, class V>
requires std::invocable<Where&, T&> T tree_at(Where&& where, const T& t,
                                              V&& replacement) {
  T out = t;
  where(out) = std::forward<V>(replacement);
  return out;
}
// The same with a path ("layers[1].bias") naming an array slot (array or None).
template <class T>
T tree_at(std::string_view path, const T& t, Array replacement) {
  Flat flat = flatten(t);
  std::vector<Array> slots = detail::expand_slots(flat.def, flat.leaves);
  slots[detail::slot_of_path("tree_at", flat.def, path)] =
      std::move(replacement);
  return detail::unflatten_slots<T>(flat.def, slots);
}

}  // namespace tree
}  // namespace kiln
