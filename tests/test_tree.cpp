// Pytrees: flatten/unflatten over registered structs and every container kind,
// paths, printing, map, partition/combine, tree_at, kiln::Tree and structure
// diffs.
#include <doctest/doctest.h>

#include <array>
#include <kiln/kiln.hpp>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"

using namespace kiln;

namespace tree_test {

Array vec(std::vector<float> v) {
  const auto n = static_cast<std::int64_t>(v.size());
  return Array::from_data<float>(std::span<const float>(v), Shape{n});
}
Array ivec(std::vector<std::int32_t> v) {
  const auto n = static_cast<std::int64_t>(v.size());
  return Array::from_data<std::int32_t>(std::span<const std::int32_t>(v),
                                        Shape{n});
}

struct Linear {
  Array weight;
  Array bias;
  KILN_MODULE(Linear, weight, bias);
};

struct Conv {
  Array weight;
  Array bias;
  KILN_MODULE(Conv, weight, bias);
};

struct Net {
  std::vector<Linear> layers;
  float scale = 1.0f;
  KILN_MODULE(Net, layers, scale);
};

// Every node kind at once.
struct Everything {
  std::vector<Linear> layers;
  std::optional<Linear> head;
  std::optional<Array> missing;
  std::map<std::string, Array> buffers;
  std::tuple<Array, int, Array> triple;
  std::pair<std::string, Array> named;
  std::array<Array, 2> pair_array;
  Tree extra;
  KILN_MODULE(Everything, layers, head, missing, buffers, triple, named,
              pair_array, extra);
};

Everything make_everything() {
  Everything e;
  e.layers = {Linear{vec({1, 2}), vec({3})}, Linear{vec({4}), Array()}};
  e.head = Linear{vec({5}), vec({6})};
  e.buffers = {{"mean", vec({7})}, {"count", ivec({8})}};
  e.triple = {vec({9}), 42, Array()};
  e.named = {"tag", vec({10})};
  e.pair_array = {vec({11}), vec({12})};
  e.extra =
      Tree::dict({{"w", vec({13})}, {"list", Tree::list({vec({14}), Tree()})}});
  return e;
}

std::vector<float> values(const std::vector<Array>& leaves) {
  std::vector<float> out;
  for (const Array& a : leaves) {
    if (a.dtype() == f32) out.push_back(a.to_vector<float>()[0]);
    if (a.dtype() == i32)
      out.push_back(static_cast<float>(a.to_vector<std::int32_t>()[0]));
  }
  return out;
}

}  // namespace tree_test

using namespace tree_test;

TEST_CASE("flatten lists the array leaves in pre-order and skips None") {
  const Everything e = make_everything();
  const auto [leaves, def] = tree::flatten(e);
  // buffers is a std::map: keys in sorted order (count before mean); extra's
  // dict too (list before w).
  CHECK(values(leaves) ==
        std::vector<float>{1, 3, 4, 5, 6, 8, 7, 9, 10, 11, 12, 14, 13});
  CHECK(def.num_leaves() == 13);
  CHECK(def.num_slots() ==
        16);  // + layers[1].bias, triple[2], extra["list"][1]
  CHECK(values(tree::leaves(e)) == values(leaves));
  CHECK(tree::structure(e) == def);
}

TEST_CASE("unflatten rebuilds a nested struct with every container kind") {
  const Everything e = make_everything();
  const auto [leaves, def] = tree::flatten(e);
  const Everything back = tree::unflatten<Everything>(def, leaves);
  CHECK(back.layers.size() == 2);
  CHECK(back.layers[0].weight.same(e.layers[0].weight));
  CHECK(back.layers[1].bias.is_null());
  REQUIRE(back.head.has_value());
  CHECK(back.head->bias.same(e.head->bias));
  CHECK_FALSE(back.missing.has_value());
  CHECK(back.buffers.at("count").same(e.buffers.at("count")));
  CHECK(std::get<1>(back.triple) == 42);  // static, rebuilt from the structure
  CHECK(std::get<2>(back.triple).is_null());
  CHECK(back.named.first == "tag");
  CHECK(back.pair_array[1].same(e.pair_array[1]));
  CHECK(back.extra["w"].array().same(e.extra["w"].array()));
  CHECK(back.extra["list"][1].is_none());
  // The rebuilt value has the same structure and leaves.
  const auto again = tree::flatten(back);
  CHECK(again.def == def);
  CHECK(values(again.leaves) == values(leaves));
}

TEST_CASE("count_elements and summary: a model's parameter count and table (issue 37)") {
  struct Head {
    Frozen<Linear> embed;
    Linear out;
    KILN_MODULE(Head, embed, out);
  };
  const Head h{{Linear{zeros({3, 4}), zeros({4})}}, Linear{zeros({4, 2}, bf16), Array()}};
  CHECK(tree::count_elements(h) == 12 + 4 + 8);
  CHECK(tree::summary(h) ==
        "embed.value.weight (frozen)  f32   (3, 4)  12\n"
        "embed.value.bias (frozen)    f32   (4,)     4\n"
        "out.weight                   bf16  (4, 2)   8\n"
        "3 arrays, 24 elements, 80 B\n");
}

TEST_CASE("paths name fields, indices and keys like layers[1].bias") {
  Net net;
  net.layers = {Linear{vec({1}), vec({2})}, Linear{vec({3}), vec({4})}};
  CHECK(tree::paths(net) ==
        std::vector<std::string>{"layers[0].weight", "layers[0].bias",
                                 "layers[1].weight", "layers[1].bias"});
  CHECK(tree::paths(make_everything()) ==
        std::vector<std::string>{
            "layers[0].weight", "layers[0].bias", "layers[1].weight",
            "head.weight", "head.bias", "buffers[\"count\"]",
            "buffers[\"mean\"]", "triple[0]", "named[1]", "pair_array[0]",
            "pair_array[1]", "extra[\"list\"][0]", "extra[\"w\"]"});
  // A bare array is the root; a list root starts with an index.
  CHECK(tree::paths(vec({1})) == std::vector<std::string>{""});
  CHECK(tree::paths(std::vector<Linear>{Linear{vec({1}), Array()}}) ==
        std::vector<std::string>{"[0].weight"});
  CHECK(tree::join_path("model", "layers[1].bias") == "model.layers[1].bias");
  CHECK(tree::join_path("xs", "[0]") == "xs[0]");
  CHECK(tree::join_path("x", "") == "x");
}

TEST_CASE("slot_paths list every array slot, None and static leaf") {
  Net net;
  net.layers = {Linear{vec({1}), Array()}};
  CHECK(tree::slot_paths(net) ==
        std::vector<SlotPath>{{"layers[0].weight", NodeKind::kArray},
                              {"layers[0].bias", NodeKind::kNone},
                              {"scale", NodeKind::kStatic}});
  const TreeDef def = tree::structure(net);
  CHECK(tree::node_path(def, 0) == "");
  CHECK(tree::node_path(def, 4) == "layers[0].bias");
  CHECK(tree::node_path(def, 5) == "scale");
}

TEST_CASE("to_string prints the structure readably") {
  Net net;
  net.layers = {Linear{vec({1}), Array()}, Linear{vec({1}), vec({2})}};
  net.scale = 0.5f;
  CHECK(to_string(tree::structure(net)) ==
        "Net(layers=[Linear(weight=*, bias=None), Linear(weight=*, bias=*)], "
        "scale=0.5)");
  CHECK(
      to_string(tree::structure(make_everything())) ==
      "Everything(layers=[Linear(weight=*, bias=*), Linear(weight=*, "
      "bias=None)], "
      "head=Linear(weight=*, bias=*), missing=nullopt, buffers={\"count\": *, "
      "\"mean\": *}, triple=(*, 42, None), named=(\"tag\", *), pair_array=[*, "
      "*], "
      "extra={\"list\": [*, None], \"w\": *})");
  CHECK(to_string(TreeDef()) == "None");
  CHECK(to_string(tree::structure(std::tuple<Array>{vec({1})})) == "(*,)");
}

TEST_CASE(
    "TreeDef equality and hash follow the structure, not the array values") {
  Net a;
  a.layers = {Linear{vec({1}), vec({2})}};
  Net b;
  b.layers = {
      Linear{vec({5, 6, 7}), ivec({1})}};  // other shapes/dtypes: same def
  CHECK(tree::structure(a) == tree::structure(b));
  CHECK(absl::Hash<TreeDef>{}(tree::structure(a)) ==
        absl::Hash<TreeDef>{}(tree::structure(b)));
  Net c = a;
  c.layers[0].bias = Array();
  CHECK_FALSE(tree::structure(a) == tree::structure(c));
  CHECK(tree::structure(a).hash() != tree::structure(c).hash());
  absl::flat_hash_map<TreeDef, int> cache;
  cache[tree::structure(a)] = 1;
  cache[tree::structure(b)] = 2;
  cache[tree::structure(c)] = 3;
  CHECK(cache.size() == 2);
  CHECK(cache.at(tree::structure(a)) == 2);
}

TEST_CASE("map applies f to corresponding leaves of several trees") {
  Net a;
  a.layers = {Linear{vec({1}), vec({2})}, Linear{vec({3}), Array()}};
  a.scale = 2.0f;
  Net b = a;
  b.layers = {Linear{vec({10}), vec({20})}, Linear{vec({30}), Array()}};
  const Net sum = tree::map(
      [](const Array& x, const Array& y) {
        return vec({x.to_vector<float>()[0] + y.to_vector<float>()[0]});
      },
      a, b);
  CHECK(values(tree::leaves(sum)) == std::vector<float>{11, 22, 33});
  CHECK(sum.layers[1].bias.is_null());
  CHECK(sum.scale == 2.0f);
  // f may return None.
  const Net dropped = tree::map([](const Array&) { return Array(); }, a);
  CHECK(tree::leaves(dropped).empty());
  CHECK(dropped.layers.size() == 2);
}

TEST_CASE(
    "map rejects trees of different structure and lists every difference") {
  Net a;
  a.layers = {Linear{vec({1}), vec({2})}, Linear{vec({3}), vec({4})}};
  Net b = a;
  b.layers[0].bias = Array();
  b.scale = 3.0f;
  CHECK_THROWS_WITH_AS(
      tree::map([](const Array& x, const Array&) { return x; }, a, b),
      "[tree.map] tree 1 does not have the structure of tree 0:\n"
      "  layers[0].bias: expected array, got None\n"
      "  scale: static value changed: 1 -> 3",
      TreeError);
}

TEST_CASE(
    "partition with is_inexact_array splits f32 from i32 and combine undoes "
    "it") {
  std::map<std::string, Array> params = {
      {"w", vec({1.5f})}, {"step", ivec({7})}, {"none", Array()}};
  const auto [floats, others] = tree::partition(params, is_inexact_array);
  CHECK(floats.at("w").same(params.at("w")));
  CHECK(floats.at("step").is_null());
  CHECK(others.at("step").same(params.at("step")));
  CHECK(others.at("w").is_null());
  CHECK(floats.at("none").is_null());
  CHECK(others.at("none").is_null());
  const auto back = tree::combine(floats, others);
  CHECK(tree::structure(back) == tree::structure(params));
  CHECK(back.at("w").same(params.at("w")));
  CHECK(back.at("step").same(params.at("step")));
  // Statics stay in both halves.
  Net net;
  net.layers = {Linear{vec({1}), ivec({2})}};
  net.scale = 4.0f;
  const auto [left, right] =
      tree::partition(net, [](const Array& x) { return x.dtype() == i32; });
  CHECK(left.scale == 4.0f);
  CHECK(right.scale == 4.0f);
  CHECK(left.layers[0].bias.same(net.layers[0].bias));
  CHECK(right.layers[0].weight.same(net.layers[0].weight));
  const auto [all, none] = tree::partition(net, is_array);
  CHECK(tree::structure(all) == tree::structure(net));
  CHECK(tree::leaves(none).empty());
  CHECK(tree::structure(tree::combine(left, right)) == tree::structure(net));
}

TEST_CASE("combine names the paths where both trees hold an array") {
  Net a;
  a.layers = {Linear{vec({1}), vec({2})}, Linear{vec({3}), Array()}};
  Net b;
  b.layers = {Linear{Array(), vec({2})}, Linear{vec({3}), vec({4})}};
  CHECK_THROWS_WITH_AS(
      tree::combine(a, b),
      "[tree.combine] both trees have an array at layers[0].bias, "
      "layers[1].weight",
      TreeError);
  Net c;
  c.layers = {Linear{vec({1}), vec({2})}};
  CHECK_THROWS_WITH_AS(tree::combine(a, c),
                       "[tree.combine] the trees have different structures:\n"
                       "  layers: length 2 vs 1",
                       TreeError);
}

TEST_CASE("tree_at replaces one leaf by accessor or by path") {
  Net net;
  net.layers = {Linear{vec({1}), vec({2})}, Linear{vec({3}), Array()}};
  const Array nb = vec({9});
  const Net a =
      tree::tree_at([](Net& m) -> Array& { return m.layers[1].bias; }, net, nb);
  CHECK(a.layers[1].bias.same(nb));
  CHECK(net.layers[1].bias.is_null());  // the original is untouched
  const Net b = tree::tree_at("layers[1].bias", net, nb);
  CHECK(b.layers[1].bias.same(nb));
  CHECK(tree::structure(a) == tree::structure(b));
  const Net c = tree::tree_at("layers[0].weight", net, Array());
  CHECK(c.layers[0].weight.is_null());
  CHECK_THROWS_WITH_AS(
      tree::tree_at("layers[2].bias", net, nb),
      "[tree_at] no array slot at 'layers[2].bias'; the array slots are: "
      "layers[0].weight, layers[0].bias, layers[1].weight, layers[1].bias",
      TreeError);
}

TEST_CASE("unflatten errors name the path and what the structure holds") {
  Net net;
  net.layers = {Linear{vec({1}), vec({2})}};
  const auto [leaves, def] = tree::flatten(net);
  CHECK_THROWS_WITH_AS(
      tree::unflatten<Net>(def, std::vector<Array>{vec({1})}),
      "[tree.unflatten] the structure has 2 array leaves, got 1 arrays",
      TreeError);
  CHECK_THROWS_WITH_AS(
      tree::unflatten<Net>(def, std::vector<Array>{vec({1}), Array()}),
      "[tree.unflatten] leaf 1 is None, but the structure has an array "
      "at layers[0].bias",
      TreeError);
  struct Other {
    std::vector<Conv> layers;
    float scale = 1.0f;
    KILN_MODULE(Other, layers, scale);
  };
  CHECK_THROWS_WITH_AS(
      tree::unflatten<Other>(def, leaves),
      doctest::Contains("[tree.unflatten] at <root>: cannot rebuild a"),
      TreeError);
  using Loose = std::tuple<std::vector<Conv>, float>;
  CHECK_THROWS_WITH_AS(
      tree::unflatten<Loose>(def, leaves),
      doctest::Contains("from a Net in the structure Net(layers="), TreeError);
  const TreeDef list3 =
      tree::structure(std::vector<Array>{vec({1}), vec({2}), vec({3})});
  using Arr2 = std::array<Array, 2>;
  CHECK_THROWS_WITH_AS(
      tree::unflatten<Arr2>(list3, tree::leaves(std::vector<Array>{
                                       vec({1}), vec({2}), vec({3})})),
      doctest::Contains("from a list of length 3"), TreeError);
  struct WithInt {
    Array w;
    int n = 0;
    KILN_MODULE(WithInt, w, n);
  };
  const TreeDef wi = tree::structure(WithInt{vec({1}), 3});
  CHECK_THROWS_WITH_AS(
      tree::unflatten<std::vector<Array>>(wi, std::vector<Array>{vec({1})}),
      doctest::Contains("at <root>: cannot rebuild a std::vector"), TreeError);
}

TEST_CASE("Tree holds arrays, statics, lists and dicts with a small API") {
  Tree t = Tree::dict({{"w", vec({1})}, {"lr", 0.5}, {"name", "adam"}});
  CHECK(t.is_dict());
  CHECK(t.keys() == std::vector<std::string>{"lr", "name", "w"});
  CHECK(t["w"].is_array());
  CHECK(t["lr"].as<double>() == 0.5);
  CHECK(t["name"].as<std::string>() == "adam");
  CHECK(t.contains("w"));
  CHECK_FALSE(t.contains("b"));
  t["b"] = Tree::list({vec({2}), Tree()});
  CHECK(t.size() == 4);
  CHECK(t["b"][0].is_array());
  CHECK(t["b"][1].is_none());
  t["b"].push_back(vec({3}));
  CHECK(t["b"].size() == 3);
  Tree grown;  // None grows into a dict or a list on first use
  grown["x"] = vec({4});
  CHECK(grown.is_dict());
  Tree items;
  items.push_back(1);
  CHECK(items.is_list());
  CHECK(items[0].as<int>() == 1);
  const Tree& ct = t;
  CHECK_THROWS_WITH_AS(
      ct["zz"],
      "[Tree] no key \"zz\" in a dict with keys [\"b\", \"lr\", "
      "\"name\", \"w\"]",
      TreeError);
  CHECK_THROWS_WITH_AS(
      ct["b"][5], "[Tree] index 5 is out of range for a list of 3", TreeError);
  CHECK_THROWS_WITH_AS(
      ct["lr"].as<float>(),
      "[Tree] as<float>(): this tree is a static double, not a static float",
      TreeError);
  CHECK_THROWS_WITH_AS(
      ct["w"][0], "[Tree] [0]: this tree is an array, not a list", TreeError);
  CHECK_THROWS_WITH_AS(Tree::dict({{"a", 1}, {"a", 2}}),
                       "[Tree::dict] repeated key \"a\"", TreeError);
  // Round trip through flatten/unflatten. A Tree prints like a typed tree of
  // the same kinds, but is another structure: a jitted function may do
  // different things with a kiln::Tree and a std::map (issue 34).
  const auto [leaves, def] = tree::flatten(t);
  CHECK(to_string(def) ==
        "{\"b\": [*, None, *], \"lr\": 0.5, \"name\": \"adam\", \"w\": *}");
  const Tree back = tree::unflatten<Tree>(def, leaves);
  CHECK(tree::structure(back) == def);
  CHECK(back["name"].as<std::string>() == "adam");
  std::map<std::string, Array> m = {{"a", vec({1})}, {"b", Array()}};
  const Tree as_tree =
      tree::unflatten<Tree>(tree::structure(m), tree::leaves(m));
  CHECK(to_string(tree::structure(as_tree)) == to_string(tree::structure(m)));
  CHECK(tree::unflatten<std::map<std::string, Array>>(tree::structure(as_tree),
                                                      tree::leaves(as_tree))
            .size() == 2);
  CHECK(!(tree::structure(as_tree) == tree::structure(m)));
  CHECK(!(tree::structure(Tree::list({vec({1}), vec({2})})) ==
          tree::structure(std::vector<Array>{vec({3}), vec({4})})));
}

TEST_CASE("diff reports a None where an array was, at its exact path") {
  Net a;
  a.layers = {Linear{vec({1}), vec({2})}, Linear{vec({3}), vec({4})}};
  Net b = a;
  b.layers[1].bias = Array();
  const auto d = tree::diff(tree::structure(a), tree::structure(b));
  REQUIRE(d.size() == 1);
  CHECK(d[0].path == "layers[1].bias");
  CHECK(d[0].kind == tree::DiffKind::kNoneVsArray);
  CHECK(d[0].description == "expected array, got None");
  const auto r = tree::diff(tree::structure(b), tree::structure(a));
  REQUIRE(r.size() == 1);
  CHECK(r[0].description == "expected None, got array");
  CHECK(tree::diff(tree::structure(a), tree::structure(a)).empty());
}

TEST_CASE("diff reports a length change at the list and not its children") {
  Net a;
  a.layers = {Linear{vec({1}), vec({2})}, Linear{vec({3}), vec({4})},
              Linear{vec({5}), vec({6})}};
  Net b;
  b.layers = {Linear{vec({1}), Array()}, Linear{vec({3}), vec({4})}};
  const auto d = tree::diff(tree::structure(a), tree::structure(b));
  REQUIRE(d.size() == 1);
  CHECK(d[0].path == "layers");
  CHECK(d[0].kind == tree::DiffKind::kLength);
  CHECK(d[0].description == "length 3 vs 2");
  CHECK(tree::format_diff(d) == "  layers: length 3 vs 2");
}

TEST_CASE("diff reports node kinds, struct types and field sets") {
  {
    const TreeDef list = tree::structure(Tree::list({vec({1})}));
    const TreeDef dict = tree::structure(Tree::dict({{"a", vec({1})}}));
    const auto d = tree::diff(list, dict);
    REQUIRE(d.size() == 1);
    CHECK(d[0].path == "");
    CHECK(d[0].kind == tree::DiffKind::kNodeKind);
    CHECK(d[0].description == "expected list, got dict");
    CHECK(tree::format_diff(d) == "  <root>: expected list, got dict");
  }
  {
    const auto a = std::vector<Linear>{Linear{vec({1}), vec({2})}};
    const auto b = std::vector<Conv>{Conv{vec({1}), vec({2})}};
    const auto d = tree::diff(tree::structure(a), tree::structure(b));
    REQUIRE(d.size() == 1);
    CHECK(d[0].path == "[0]");
    CHECK(d[0].kind == tree::DiffKind::kTypeName);
    CHECK(d[0].description == "tree_test::Linear -> tree_test::Conv");
  }
  {
    const auto a = Tree::dict({{"x", vec({1})}});
    const auto b = Tree::dict({{"x", 3}});
    const auto d = tree::diff(tree::structure(a), tree::structure(b));
    REQUIRE(d.size() == 1);
    CHECK(d[0].path == "[\"x\"]");
    CHECK(d[0].kind == tree::DiffKind::kNodeKind);
    CHECK(d[0].description == "expected array, got static int");
  }
  {
    // Two types registered under one name: their C++ types tell them apart.
    struct V1 {
      using Layer = V1;
      Array w;
      KILN_MODULE(Layer, w);
    };
    struct V2 {
      using Layer = V2;
      Array w, b;
      KILN_MODULE(Layer, w, b);
    };
    const auto d = tree::diff(tree::structure(V1{vec({1})}),
                              tree::structure(V2{vec({1}), vec({2})}));
    REQUIRE(d.size() == 1);
    CHECK(d[0].kind == tree::DiffKind::kTypeName);
    CHECK(d[0].description == "V1 -> V2");
  }
}

TEST_CASE("diff reports changed dict keys and still compares the common keys") {
  std::map<std::string, Array> a = {
      {"a", vec({1})}, {"b", vec({2})}, {"c", vec({3})}};
  std::map<std::string, Array> b = {
      {"a", Array()}, {"c", vec({3})}, {"d", vec({4})}};
  const auto d = tree::diff(tree::structure(a), tree::structure(b));
  REQUIRE(d.size() == 2);
  CHECK(d[0].path == "");
  CHECK(d[0].kind == tree::DiffKind::kKeys);
  CHECK(d[0].description ==
        "keys [\"a\", \"b\", \"c\"] vs [\"a\", \"c\", \"d\"]: missing \"b\", "
        "extra \"d\"");
  CHECK(d[1].path == "[\"a\"]");
  CHECK(d[1].kind == tree::DiffKind::kNoneVsArray);
}

TEST_CASE("diff reports static value and static type changes") {
  Net a;
  a.scale = 0.5f;
  Net b;
  b.scale = 0.25f;
  auto d = tree::diff(tree::structure(a), tree::structure(b));
  REQUIRE(d.size() == 1);
  CHECK(d[0].path == "scale");
  CHECK(d[0].kind == tree::DiffKind::kStaticValue);
  CHECK(d[0].description == "static value changed: 0.5 -> 0.25");
  d = tree::diff(tree::structure(Tree::dict({{"lr", 0.5f}})),
                 tree::structure(Tree::dict({{"lr", 1}})));
  REQUIRE(d.size() == 1);
  CHECK(d[0].path == "[\"lr\"]");
  CHECK(d[0].kind == tree::DiffKind::kStaticType);
  CHECK(d[0].description == "static type changed: float -> int (0.5 -> 1)");
}

TEST_CASE("diff lists every differing leaf, deepest first-found, no cascade") {
  Everything a = make_everything();
  Everything b = make_everything();
  b.layers[0].weight = Array();
  b.head.reset();
  std::get<1>(b.triple) = 43;
  b.extra["list"].push_back(vec({1}));
  const auto d = tree::diff(tree::structure(a), tree::structure(b));
  CHECK(tree::format_diff(d) ==
        "  layers[0].weight: expected array, got None\n"
        "  head: expected optional of Linear, got empty optional\n"
        "  triple[1]: static value changed: 42 -> 43\n"
        "  extra[\"list\"]: length 2 vs 3");
}
