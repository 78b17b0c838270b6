// Pytree structures as cache keys, over generated types and values (issue 34):
// every C++ type built from the node kinds the tree traits know (standard
// containers, KILN_MODULE structs, arrays, statics) at depth 1 and 2. For each
// type, random values must rebuild to exactly what was flattened (nested
// optionals included), the jit's in-place matcher must agree with TreeDef ==,
// and no value of one type may have the structure of a value of another type.
// The node kinds the generated structures reach are checked against every
// NodeKind, so a new kind of node cannot go untested.
#include <doctest/doctest.h>

#include <array>
#include <kiln/kiln.hpp>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

using namespace kiln;

namespace tree_keys {

template <class T>
struct Box {
  T value{};
  KILN_MODULE(Box, value);
};

// The node constructors: each turns a type T into a node holding T.
template <class T>
using Vec = std::vector<T>;
template <class T>
using Arr2 = std::array<T, 2>;
template <class T>
using Pair = std::pair<T, T>;
template <class T>
using Tup = std::tuple<T, T>;
template <class T>
using Opt = std::optional<T>;
template <class T>
using Dict = std::map<std::string, T>;

template <class... T>
struct Types {};
template <template <class> class... W>
struct Wrappers {};
using AllWrappers = Wrappers<Vec, Arr2, Pair, Tup, Opt, Dict, Box>;

template <class... L>
struct Concat;
template <class... A>
struct Concat<Types<A...>> {
  using type = Types<A...>;
};
template <class... A, class... B, class... Rest>
struct Concat<Types<A...>, Types<B...>, Rest...> {
  using type = typename Concat<Types<A..., B...>, Rest...>::type;
};

// Every wrapper applied to every type of a list.
template <class W, class L>
struct ApplyAll;
template <template <class> class... W, class L>
struct ApplyAll<Wrappers<W...>, Types<L>> {
  using type = Types<W<L>...>;
};
template <class W, class... L>
struct ApplyAll<W, Types<L...>> {
  using type = typename Concat<Types<>, typename ApplyAll<W, Types<L>>::type...>::type;
};

using Leaves = Types<Array, int, float>;
using Depth1 = typename ApplyAll<AllWrappers, Leaves>::type;
using Depth2 = typename ApplyAll<AllWrappers, typename ApplyAll<AllWrappers, Types<Array, int>>::type>::type;
using AllTypes = typename Concat<Leaves, Depth1, Depth2>::type;

// ---- random values ----
template <class T>
struct Gen;

template <>
struct Gen<Array> {
  static Array make(std::mt19937& rng) {
    const int pick = static_cast<int>(rng() % 5);
    if (pick == 0) return Array();  // None
    if (pick == 1) return array<int>({1, 2});
    if (pick == 2) return array<float>({1.0f, 2.0f});
    if (pick == 3) return array<float>({1.0f, 2.0f, 3.0f});
    return scalar(2.0f);
  }
};
template <>
struct Gen<int> {
  static int make(std::mt19937& rng) { return static_cast<int>(rng() % 3) - 1; }
};
template <>
struct Gen<float> {
  static float make(std::mt19937& rng) {
    // -0.0 and 0.0 differ by bits; NaN equals NaN by bits.
    constexpr float kValues[] = {0.0f, -0.0f, 1.5f, std::numeric_limits<float>::quiet_NaN()};
    return kValues[rng() % 4];
  }
};
template <class T>
struct Gen<std::vector<T>> {
  static std::vector<T> make(std::mt19937& rng) {
    std::vector<T> out;
    for (std::size_t n = rng() % 3; n > 0; --n) out.push_back(Gen<T>::make(rng));
    return out;
  }
};
template <class T>
struct Gen<std::array<T, 2>> {
  static std::array<T, 2> make(std::mt19937& rng) {
    T a = Gen<T>::make(rng);
    return {a, Gen<T>::make(rng)};
  }
};
template <class T>
struct Gen<std::pair<T, T>> {
  static std::pair<T, T> make(std::mt19937& rng) {
    T a = Gen<T>::make(rng);
    return {a, Gen<T>::make(rng)};
  }
};
template <class T>
struct Gen<std::tuple<T, T>> {
  static std::tuple<T, T> make(std::mt19937& rng) {
    T a = Gen<T>::make(rng);
    return {a, Gen<T>::make(rng)};
  }
};
template <class T>
struct Gen<std::optional<T>> {
  static std::optional<T> make(std::mt19937& rng) {
    if (rng() % 2 == 0) return std::nullopt;
    return Gen<T>::make(rng);
  }
};
template <class T>
struct Gen<std::map<std::string, T>> {
  static std::map<std::string, T> make(std::mt19937& rng) {
    std::map<std::string, T> out;
    for (const char* k : {"a", "b"}) {
      if (rng() % 2 == 0) out.emplace(k, Gen<T>::make(rng));
    }
    return out;
  }
};
template <class T>
struct Gen<Box<T>> {
  static Box<T> make(std::mt19937& rng) { return Box<T>{Gen<T>::make(rng)}; }
};

// ---- one generated value, type-erased for the cross-type checks ----
struct Sample {
  std::string type;  // as structure messages name it
  std::size_t type_index = 0;
  tree::Flat flat;
  std::vector<Aval> avals;
  // Whether this sample's value matches (in place, as the jit's hit path
  // does) a structure with the given leaf avals.
  bool (*matches)(const Sample&, const TreeDef&, std::span<const Aval>) = nullptr;
  std::shared_ptr<const void> value;
};

template <class T>
bool matches_as(const Sample& s, const TreeDef& def, std::span<const Aval> avals) {
  std::vector<const Array*> leaves;
  return detail::matches(*static_cast<const T*>(s.value.get()), def, avals, Device::cpu(),
                         leaves);
}

std::vector<Aval> avals_of(const std::vector<Array>& leaves) {
  std::vector<Aval> out;
  for (const Array& a : leaves) out.push_back(a.aval());
  return out;
}

bool same_leaves(const std::vector<Array>& a, const std::vector<Array>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!a[i].same(b[i])) return false;
  }
  return true;
}

struct Failures {
  std::size_t count = 0;
  std::vector<std::string> first;
  void add(std::string what) {
    if (count++ < 8) first.push_back(std::move(what));
  }
};

// Per type: round trips, and the matcher against every other sample of the type.
template <class T>
void check_type(std::size_t index, std::mt19937& rng, std::vector<Sample>& samples,
                Failures& fail) {
  const std::string type = detail::tree_type_name<T>();
  std::vector<Sample> mine;
  for (int i = 0; i < 12; ++i) {
    auto value = std::make_shared<const T>(Gen<T>::make(rng));
    Sample s{type, index, tree::flatten(*value), {}, &matches_as<T>, value};
    s.avals = avals_of(s.flat.leaves);
    // Rebuilding gives back exactly what was flattened.
    const T back = tree::unflatten<T>(s.flat.def, s.flat.leaves);
    const tree::Flat again = tree::flatten(back);
    if (!(again.def == s.flat.def) || !same_leaves(again.leaves, s.flat.leaves)) {
      fail.add(type + ": unflatten(flatten(v)) differs from v: " + to_string(s.flat.def) +
               " -> " + to_string(again.def));
    }
    // Through the per-slot path (tree::map) as well.
    const T mapped = tree::map([](const Array& a) { return a; }, *value);
    if (!(tree::structure(mapped) == s.flat.def)) {
      fail.add(type + ": tree::map(identity) changed the structure " + to_string(s.flat.def));
    }
    if (tree::paths(s.flat.def).size() != s.flat.leaves.size()) {
      fail.add(type + ": one path per leaf");
    }
    mine.push_back(std::move(s));
  }
  // The hit path's matcher agrees with the key's == (and equal keys hash alike).
  for (const Sample& a : mine) {
    for (const Sample& b : mine) {
      const bool equal = a.flat.def == b.flat.def && a.avals == b.avals;
      if (a.flat.def == b.flat.def && a.flat.def.hash() != b.flat.def.hash()) {
        fail.add(type + ": equal structures with different hashes");
      }
      if (matches_as<T>(b, a.flat.def, a.avals) != equal) {
        fail.add(type + ": the matcher says " + (equal ? "no" : "yes") + " where == says " +
                 (equal ? "yes" : "no") + ": " + to_string(a.flat.def) + " vs " +
                 to_string(b.flat.def));
      }
    }
  }
  for (Sample& s : mine) samples.push_back(std::move(s));
}

template <class... T>
void check_all(Types<T...>, std::vector<Sample>& samples, Failures& fail) {
  std::mt19937 rng(34);
  std::size_t index = 0;
  (check_type<T>(index++, rng, samples, fail), ...);
}

}  // namespace tree_keys

using namespace tree_keys;

TEST_CASE("generated trees of every node kind: round trips, keys of distinct types never equal") {
  std::vector<Sample> samples;
  Failures fail;
  check_all(AllTypes{}, samples, fail);
  // Distinct C++ types never share a structure, by == or by the matcher, for
  // any values (empty containers and disengaged optionals included).
  std::size_t compared = 0;
  for (const Sample& a : samples) {
    for (const Sample& b : samples) {
      if (a.type_index == b.type_index) continue;
      ++compared;
      if (a.flat.def == b.flat.def) {
        fail.add(a.type + " and " + b.type + " share the structure " + to_string(a.flat.def));
      }
      if (b.matches(b, a.flat.def, a.avals)) {
        fail.add(b.type + " matched in place the key of a " + a.type + ": " +
                 to_string(a.flat.def));
      }
    }
  }
  std::string first;
  for (const std::string& f : fail.first) first += f + "\n";
  INFO("first failures:\n" << first);
  CHECK(fail.count == 0);
  CHECK(compared > 100000);
  // Every node kind was generated (the enum is enumerated, not listed here).
  std::set<int> seen;
  for (const Sample& s : samples) {
    for (const detail::DefNode& n : s.flat.def.nodes()) seen.insert(static_cast<int>(n.kind));
  }
  for (int k = 0; name(static_cast<NodeKind>(k)) != "?"; ++k) {
    INFO("node kind " << name(static_cast<NodeKind>(k)) << " was never generated");
    CHECK(seen.count(k) == 1);
  }
}

TEST_CASE("structure differences name the C++ types") {
  const Array a = array<float>({1.0f});
  const auto d = tree::diff(tree::structure(std::pair{a, a}), tree::structure(std::tuple{a, a}));
  REQUIRE(d.size() == 1);
  CHECK(d[0].kind == tree::DiffKind::kTypeName);
  CHECK(tree::format_diff(d) ==
        "  <root>: std::pair<Array, Array> -> std::tuple<Array, Array>");
  const auto e = tree::diff(tree::structure(std::vector<int>{}), tree::structure(std::vector<float>{}));
  REQUIRE(e.size() == 1);
  CHECK(e[0].description == "std::vector<int> -> std::vector<float>");
  const auto o = tree::diff(tree::structure(std::optional<std::optional<int>>(std::optional<int>())),
                            tree::structure(std::optional<std::optional<int>>()));
  REQUIRE(o.size() == 1);
  CHECK(o[0].description == "expected optional of empty optional, got empty optional");
  // kiln::Tree's nodes are dynamic: a Tree list is not a std::vector.
  const auto t = tree::diff(tree::structure(Tree::list({Tree(a)})),
                            tree::structure(std::vector<Array>{a}));
  REQUIRE(t.size() == 1);
  CHECK(t[0].description == "kiln::Tree -> std::vector<Array>");
}

TEST_CASE("a nested optional round-trips its inner emptiness, also through Tree") {
  using O = std::optional<std::optional<int>>;
  const O inner_empty{std::optional<int>()};
  const tree::Flat f = tree::flatten(inner_empty);
  const O back = tree::unflatten<O>(f.def, f.leaves);
  REQUIRE(back.has_value());
  CHECK(!back->has_value());
  CHECK(to_string(f.def) == "nullopt");  // printing sees through the engaged outer one
  CHECK(tree::paths(tree::structure(std::optional<Array>(array<float>({1.0f})))) ==
        std::vector<std::string>{""});
  // An engaged optional reads as its value in a kiln::Tree.
  const tree::Flat g = tree::flatten(std::optional<std::vector<Array>>(std::vector{scalar(1.0f)}));
  const Tree t = tree::unflatten<Tree>(g.def, g.leaves);
  CHECK(t.is_list());
}
