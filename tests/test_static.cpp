// Static leaves (seeds 1 and 4): stable callable identity across
// re-construction, values copied into the TreeDef, comparison by type then ==,
// never by hash alone.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <kiln/kiln.hpp>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

using namespace kiln;

namespace static_test {

Array relu(const Array& x) { return x; }
Array gelu(const Array& x) { return neg(x); }

// A captureless lambda stored by its own type: identity = the type.
inline constexpr auto square = [](const Array& x) { return x; };
inline constexpr auto cube = [](const Array& x) { return neg(x); };

struct Linear {
  Array weight;
  Array bias;
  KILN_MODULE(Linear, weight, bias);
};

struct MLP {
  std::vector<Linear> layers;
  Array (*activation)(const Array&) = nullptr;
  KILN_MODULE(MLP, layers, activation);
};

template <class Act>
struct LambdaMLP {
  std::vector<Linear> layers;
  Act activation{};
  KILN_MODULE(LambdaMLP, layers, activation);
};

Array vec(float v) {
  return Array::from_data<float>(std::span<const float>(&v, 1), Shape{1});
}

MLP make_mlp(Array (*act)(const Array&)) {
  MLP m;
  m.layers = {Linear{vec(1), vec(2)},
              Linear{vec(3), vec(4)}};  // fresh arrays each time
  m.activation = act;
  return m;
}

// Built the way user code often does it: a lambda written inside the factory.
MLP make_mlp_with_inline_lambda() {
  MLP m = make_mlp(nullptr);
  m.activation = +[](const Array& x) { return x; };
  return m;
}

struct Config {
  int width = 0;
  std::vector<int> dims;
  friend bool operator==(const Config&, const Config&) = default;
  template <class H>
  friend H AbslHashValue(H h, const Config& c) {
    return H::combine(std::move(h), c.width, c.dims);
  }
};

// Every value hashes the same: only == can tell them apart. (A declared value:
// kiln uses its own == and hash; an aggregate would be hashed field by field.)
class Colliding {
 public:
  KILN_STATIC_VALUE(Colliding);
  explicit Colliding(int v = 0) : v(v) {}
  int v = 0;
  friend bool operator==(const Colliding&, const Colliding&) = default;
  template <class H>
  friend H AbslHashValue(H h, const Colliding&) {
    return H::combine(std::move(h), 0);
  }
};

// A named, comparable function object: a valid alternative to std::function.
struct Scale {
  float factor = 1.0f;
  Array operator()(const Array& x) const { return x; }
  friend bool operator==(const Scale&, const Scale&) = default;
  template <class H>
  friend H AbslHashValue(H h, const Scale& s) {
    return H::combine(std::move(h), s.factor);
  }
};

enum class Mode { kTrain = 0, kEval = 1 };

struct Holder {
  Array w;
  Static<Config> config;
  KILN_MODULE(Holder, w, config);
};

}  // namespace static_test

using namespace static_test;

// The concept is a soft check usable in constraints; the hard checks with
// diagnostics are exercised by tests/compile_fail.
static_assert(StaticLeaf<int>);
static_assert(StaticLeaf<float>);
static_assert(StaticLeaf<bool>);
static_assert(StaticLeaf<Mode>);
static_assert(StaticLeaf<std::string>);
static_assert(StaticLeaf<Array (*)(const Array&)>);
static_assert(StaticLeaf<std::remove_const_t<decltype(square)>>);
static_assert(StaticLeaf<Static<Config>>);
static_assert(StaticLeaf<Scale>);
static_assert(!StaticLeaf<std::function<Array(const Array&)>>);
static_assert(!StaticLeaf<const char*>);
static_assert(!StaticLeaf<std::string_view>);
static_assert(!StaticLeaf<Static<std::function<void()>>>);

TEST_CASE(
    "the same module built twice with a function pointer has one structure") {
  const TreeDef a = tree::structure(make_mlp(&static_test::relu));
  const TreeDef b = tree::structure(make_mlp(&static_test::relu));
  CHECK(a == b);
  CHECK(a.hash() == b.hash());
  CHECK(absl::Hash<TreeDef>{}(a) == absl::Hash<TreeDef>{}(b));
  CHECK(to_string(a) ==
        "MLP(layers=[Linear(weight=*, bias=*), Linear(weight=*, bias=*)], "
        "activation=<fn static_test::relu>)");
  // A lambda converted to a function pointer inside a factory is one function.
  CHECK(tree::structure(make_mlp_with_inline_lambda()) ==
        tree::structure(make_mlp_with_inline_lambda()));
}

TEST_CASE(
    "the same module built twice with a captureless lambda type has one "
    "structure") {
  using M = LambdaMLP<std::remove_const_t<decltype(square)>>;
  M m1;
  m1.layers = {Linear{vec(1), vec(2)}};
  M m2;
  m2.layers = {Linear{vec(5), vec(6)}};
  const TreeDef a = tree::structure(m1);
  const TreeDef b = tree::structure(m2);
  CHECK(a == b);
  CHECK(a.hash() == b.hash());
  CHECK(to_string(a) ==
        "LambdaMLP(layers=[Linear(weight=*, bias=*)], activation=<fn "
        "static_test::square>)");
  // It round-trips: unflatten rebuilds the activation from the structure.
  const M back = tree::unflatten<M>(a, tree::leaves(m1));
  CHECK(back.activation(vec(7)).to_vector<float>() == std::vector<float>{7});
}

TEST_CASE(
    "a different activation gives a different structure and the diff names "
    "both") {
  const TreeDef a = tree::structure(make_mlp(&static_test::relu));
  const TreeDef b = tree::structure(make_mlp(&static_test::gelu));
  CHECK_FALSE(a == b);
  const auto d = tree::diff(a, b);
  REQUIRE(d.size() == 1);
  CHECK(d[0].path == "activation");
  CHECK(d[0].kind == tree::DiffKind::kCallableIdentity);
  CHECK(d[0].description ==
        "callable identity changed: static_test::relu -> static_test::gelu");
  // Lambdas stored by type make the module a different C++ type, and the
  // types' names show the variables the lambdas came from.
  LambdaMLP<std::remove_const_t<decltype(square)>> sq;
  LambdaMLP<std::remove_const_t<decltype(cube)>> cu;
  const auto dl = tree::diff(tree::structure(sq), tree::structure(cu));
  REQUIRE(dl.size() == 1);
  CHECK(dl[0].path == "");
  CHECK(dl[0].kind == tree::DiffKind::kTypeName);
  CHECK(dl[0].description ==
        "static_test::LambdaMLP<static_test::square::{lambda(kiln::Array const&)#1}> -> "
        "static_test::LambdaMLP<static_test::cube::{lambda(kiln::Array const&)#1}>");
}

TEST_CASE(
    "Static<T> keeps a copy: mutating the module later cannot change a "
    "structure") {
  Holder h{vec(1), Config{4, {1, 2}}};
  const TreeDef before = tree::structure(h);
  h.config->width = 8;
  h.config->dims.push_back(3);
  const TreeDef after = tree::structure(h);
  CHECK_FALSE(before == after);
  // The stored value is still the old one.
  const Holder rebuilt = tree::unflatten<Holder>(before, tree::leaves(h));
  CHECK(rebuilt.config->width == 4);
  CHECK(rebuilt.config->dims == std::vector<int>{1, 2});
  CHECK(before == tree::structure(Holder{vec(9), Config{4, {1, 2}}}));
  const auto d = tree::diff(before, after);
  REQUIRE(d.size() == 1);
  CHECK(d[0].path == "config");
  CHECK(d[0].kind == tree::DiffKind::kStaticValue);
}

TEST_CASE("static values whose hashes collide are still different structures") {
  const StaticValue one = StaticValue::of(Static<Colliding>{Colliding{1}});
  const StaticValue two = StaticValue::of(Static<Colliding>{Colliding{2}});
  CHECK(one.hash() == two.hash());
  CHECK_FALSE(one == two);
  const TreeDef a =
      tree::structure(Tree::dict({{"c", Static<Colliding>{Colliding{1}}}}));
  const TreeDef b =
      tree::structure(Tree::dict({{"c", Static<Colliding>{Colliding{2}}}}));
  CHECK(a.hash() == b.hash());
  CHECK_FALSE(a == b);
  CHECK(a ==
        tree::structure(Tree::dict({{"c", Static<Colliding>{Colliding{1}}}})));
}

TEST_CASE("static equality compares the type before the value") {
  CHECK_FALSE(StaticValue::of(1) == StaticValue::of(1L));
  CHECK_FALSE(StaticValue::of(1.0f) == StaticValue::of(1.0));
  CHECK(StaticValue::of(std::string("a")) == StaticValue::of(std::string("a")));
  CHECK(StaticValue::of(Scale{2}) == StaticValue::of(Scale{2}));
  CHECK_FALSE(StaticValue::of(Scale{2}) == StaticValue::of(Scale{3}));
  CHECK(StaticValue::of(square) == StaticValue::of(square));
  CHECK_FALSE(StaticValue::of(square) == StaticValue::of(cube));
  CHECK(StaticValue::of(&static_test::relu) ==
        StaticValue::of(&static_test::relu));
  CHECK_FALSE(StaticValue::of(&static_test::relu) ==
              StaticValue::of(&static_test::gelu));
  // Floats compare by bits: a NaN static equals the same NaN (so a NaN value
  // does not retrace on every call), and -0.0 is not 0.0 (x / s tells them
  // apart).
  const float nan = std::numeric_limits<float>::quiet_NaN();
  CHECK(StaticValue::of(nan) == StaticValue::of(nan));
  CHECK(StaticValue::of(nan).hash() == StaticValue::of(nan).hash());
  CHECK_FALSE(StaticValue::of(nan) == StaticValue::of(-nan));
  CHECK_FALSE(StaticValue::of(0.0) == StaticValue::of(-0.0));
  CHECK_FALSE(StaticValue::of(Static<double>{0.0}) == StaticValue::of(Static<double>{-0.0}));
  CHECK(StaticValue::of(Static<double>{std::nan("")}) ==
        StaticValue::of(Static<double>{std::nan("")}));
}

TEST_CASE(
    "changing a static value changes the structure; keeping it does not") {
  auto def_of = [](float lr, Mode mode) {
    return tree::structure(std::tuple<Array, float, Mode>{vec(1), lr, mode});
  };
  CHECK(def_of(0.5f, Mode::kTrain) == def_of(0.5f, Mode::kTrain));
  CHECK_FALSE(def_of(0.5f, Mode::kTrain) == def_of(0.25f, Mode::kTrain));
  const auto d =
      tree::diff(def_of(0.5f, Mode::kTrain), def_of(0.5f, Mode::kEval));
  REQUIRE(d.size() == 1);
  CHECK(d[0].path == "[2]");
  CHECK(d[0].description ==
        "static value changed: static_test::Mode(0) -> "
        "static_test::Mode(1)");
}

TEST_CASE("static values print as numbers, strings, enums and function names") {
  CHECK(StaticValue::of(3).repr() == "3");
  CHECK(StaticValue::of(0.1f).repr() == "0.1");
  CHECK(StaticValue::of(0.25).repr() == "0.25");
  CHECK(StaticValue::of(true).repr() == "true");
  CHECK(StaticValue::of(std::string("a\"b")).repr() == "\"a\\\"b\"");
  CHECK(StaticValue::of(Mode::kEval).repr() == "static_test::Mode(1)");
  CHECK(StaticValue::of(&static_test::relu).repr() == "static_test::relu");
  CHECK(StaticValue::of(&static_test::gelu).is_callable());
  CHECK(StaticValue::of(square).is_callable());
  CHECK_FALSE(StaticValue::of(3).is_callable());
  // Functions exported from libkiln are found through dladdr.
  CHECK(StaticValue::of(static_cast<Array (*)(const Array&)>(&kiln::neg))
            .repr() == "kiln::neg");
  CHECK(StaticValue::of(Static<Config>{{3, {1, 2}}}).repr() ==
        "static_test::Config{width=3, dims=[1, 2]}");
  CHECK(StaticValue::of(Static<int>{5}).repr() == "5");
  CHECK(StaticValue::of(3).type_name() == "int");
  Array (*null_fn)(const Array&) = nullptr;
  CHECK(StaticValue::of(null_fn).repr() == "nullptr");
}

TEST_CASE("a named comparable function object is a valid static callable") {
  struct WithScale {
    Array w;
    Scale act;
    KILN_MODULE(WithScale, w, act);
  };
  const TreeDef a = tree::structure(WithScale{vec(1), Scale{2}});
  CHECK(a == tree::structure(WithScale{vec(3), Scale{2}}));
  CHECK_FALSE(a == tree::structure(WithScale{vec(1), Scale{3}}));
  const WithScale back =
      tree::unflatten<WithScale>(a, std::vector<Array>{vec(1)});
  CHECK(back.act.factor == 2.0f);
}

TEST_CASE(
    "a StaticValue can be stored in a Tree or a struct without rewrapping") {
  const StaticValue v = StaticValue::of(7);
  const Tree t = Tree::value(v);
  CHECK(t.as<int>() == 7);
  CHECK(tree::structure(t) == tree::structure(Tree(7)));
  CHECK(tree::structure(v) == tree::structure(7));
  const auto back = tree::unflatten<StaticValue>(tree::structure(7), {});
  CHECK(back == v);
}
