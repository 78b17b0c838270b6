// filter_jit keys that cannot go stale (issue 15): struct identity is the C++
// type, floats compare by bits (bare, wrapped, inside containers and structs),
// statics are copies, and a changed struct static is explained with its values.
// Every decision is checked against eager results. Device-generic (KILN_DEVICE).
// The refusals (pointers, smart pointers, references, views, capturing lambdas,
// forgotten or incomplete KILN_MODULE) are compile errors: tests/compile_fail.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <kiln/kiln.hpp>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <variant>
#include <vector>

using namespace kiln;

namespace static_keys {

std::vector<float> values(const Array& a) { return a.to_vector<float>(); }

// Equal as IEEE values, with NaN equal to NaN and the sign of zero and of
// infinities respected (what x / 0.0 versus x / -0.0 differ in).
void check_same(const Array& a, const Array& b) {
  REQUIRE(a.shape() == b.shape());
  const auto x = values(a), y = values(b);
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) || std::isnan(y[i])) {
      CHECK(std::isnan(x[i]) == std::isnan(y[i]));
    } else if (std::isinf(x[i]) || std::isinf(y[i])) {
      CHECK(x[i] == y[i]);
    } else {
      CHECK(x[i] == doctest::Approx(y[i]));
      CHECK(std::signbit(x[i]) == std::signbit(y[i]));
    }
  }
}

Array input() { return array<float>({1.0f, -2.0f, 0.5f}); }

template <int N>
struct Pow {
  Array w;
  KILN_MODULE(Pow, w);
  Array operator()(const Array& x) const {
    Array y = x;
    for (int i = 1; i < N; ++i) y = y * x;
    return y * w;
  }
};

}  // namespace static_keys

namespace a {
struct Linear {
  kiln::Array w;
  KILN_MODULE(Linear, w);
  kiln::Array apply(const kiln::Array& x) const { return x * w; }
};
}  // namespace a
namespace b {
struct Linear {
  kiln::Array w;
  KILN_MODULE(Linear, w);
  kiln::Array apply(const kiln::Array& x) const { return x + w; }
};
}  // namespace b

namespace static_keys {

struct Cfg {
  int k = 2;
  double scale = 1.0;
  friend bool operator==(const Cfg&, const Cfg&) = default;
  template <class H>
  friend H AbslHashValue(H h, const Cfg& c) {
    return H::combine(std::move(h), c.k, c.scale);
  }
};

struct Scaled {
  Array w;
  Cfg cfg;  // a plain struct field: a static leaf, checked field by field
  KILN_MODULE(Scaled, w, cfg);
};

}  // namespace static_keys

using namespace static_keys;

TEST_CASE("template instantiations of one struct are different keys") {
  auto f = filter_jit([](const auto& m, const Array& x) { return m(x); });
  const Pow<2> p2{array<float>({1.0f, 1.0f, 1.0f})};
  const Pow<3> p3{array<float>({1.0f, 1.0f, 1.0f})};
  check_same(f(p2, input()), p2(input()));
  check_same(f(p3, input()), p3(input()));
  CHECK(f.trace_count() == 2);
  CHECK(f.last_retrace().find("arg0: type changed, static_keys::Pow<2> -> "
                              "static_keys::Pow<3>") != std::string::npos);
  check_same(f(p2, input()), p2(input()));
  CHECK(f.trace_count() == 2);
}

TEST_CASE("structs of one name in two namespaces are different keys") {
  auto f = filter_jit([](const auto& m, const Array& x) { return m.apply(x); });
  const a::Linear la{array<float>({2.0f, 2.0f, 2.0f})};
  const b::Linear lb{array<float>({2.0f, 2.0f, 2.0f})};
  check_same(f(la, input()), la.apply(input()));
  check_same(f(lb, input()), lb.apply(input()));
  CHECK(f.trace_count() == 2);
  CHECK(f.last_retrace().find("type changed, a::Linear -> b::Linear") != std::string::npos);
}

TEST_CASE("0.0 and -0.0 statics are different keys, bare and wrapped") {
  auto bare = filter_jit([](const Array& x, double s) { return x / s; });
  check_same(bare(input(), 0.0), input() / 0.0);
  check_same(bare(input(), -0.0), input() / -0.0);
  CHECK(bare.trace_count() == 2);
  CHECK(bare.last_retrace().find("arg1: static_value changed, static value changed: 0 -> -0") != std::string::npos);

  auto wrapped = filter_jit([](const Array& x, const Static<float>& s) { return x / *s; });
  check_same(wrapped(input(), Static<float>{0.0f}), input() / 0.0f);
  check_same(wrapped(input(), Static<float>{-0.0f}), input() / -0.0f);
  CHECK(wrapped.trace_count() == 2);
}

TEST_CASE("a NaN static is one key, bare and wrapped: no retrace per call") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto bare = filter_jit([](const Array& x, double s) { return x * s; });
  auto wrapped = filter_jit([](const Array& x, const Static<double>& s) { return x * *s; });
  for (int i = 0; i < 3; ++i) {
    check_same(bare(input(), nan), input() * nan);
    check_same(wrapped(input(), Static<double>{nan}), input() * nan);
  }
  CHECK(bare.trace_count() == 1);
  CHECK(bare.cache_size() == 1);
  CHECK(wrapped.trace_count() == 1);
  CHECK(wrapped.cache_size() == 1);
}

TEST_CASE("floats inside containers and structs follow the same rule") {
  auto in_vector = filter_jit(
      [](const Array& x, const Static<std::vector<double>>& s) { return x / s->at(1); });
  check_same(in_vector(input(), Static<std::vector<double>>{{1.0, 0.0}}), input() / 0.0);
  check_same(in_vector(input(), Static<std::vector<double>>{{1.0, -0.0}}), input() / -0.0);
  CHECK(in_vector.trace_count() == 2);

  // A struct's defaulted == says 0.0 == -0.0; kiln keys on its fields' bits.
  auto in_struct = filter_jit([](const Scaled& m, const Array& x) {
    return m.w * x / m.cfg.scale;
  });
  const Array w = array<float>({1.0f, 1.0f, 1.0f});
  check_same(in_struct(Scaled{w, Cfg{2, 0.0}}, input()), input() / 0.0);
  check_same(in_struct(Scaled{w, Cfg{2, -0.0}}, input()), input() / -0.0);
  CHECK(in_struct.trace_count() == 2);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  in_struct(Scaled{w, Cfg{2, nan}}, input());
  in_struct(Scaled{w, Cfg{2, nan}}, input());
  CHECK(in_struct.trace_count() == 3);

  auto in_tuple = filter_jit([](const Array& x, const Static<std::tuple<int, float>>& s) {
    return x / std::get<1>(*s);
  });
  in_tuple(input(), Static<std::tuple<int, float>>{{1, 0.0f}});
  check_same(in_tuple(input(), Static<std::tuple<int, float>>{{1, -0.0f}}), input() / -0.0f);
  CHECK(in_tuple.trace_count() == 2);
}

TEST_CASE("a changed struct static is explained with its field values") {
  auto f = filter_jit([](const Scaled& m, const Array& x) {
    return m.w * x * static_cast<double>(m.cfg.k);
  });
  const Array w = array<float>({1.0f, 2.0f, 3.0f});
  check_same(f(Scaled{w, Cfg{2, 0.5}}, input()), w * input() * 2.0);
  check_same(f(Scaled{w, Cfg{7, 0.5}}, input()), w * input() * 7.0);
  CHECK(f.trace_count() == 2);
  INFO(f.last_retrace());
  CHECK(f.last_retrace().find("arg0.cfg: static_value changed, static value changed: "
                              "static_keys::Cfg{k=2, scale=0.5} -> static_keys::Cfg{k=7, "
                              "scale=0.5}") !=
        std::string::npos);
}

TEST_CASE("statics are copies: changing the caller's value afterwards retraces") {
  auto f = filter_jit([](const Array& x, const Static<std::map<std::string, double>>& s) {
    return x * s->at("k");
  });
  std::map<std::string, double> settings{{"k", 2.0}};
  check_same(f(input(), Static<std::map<std::string, double>>{settings}), input() * 2.0);
  settings["k"] = 5.0;
  check_same(f(input(), Static<std::map<std::string, double>>{settings}), input() * 5.0);
  CHECK(f.trace_count() == 2);
  settings["k"] = 2.0;
  check_same(f(input(), Static<std::map<std::string, double>>{settings}), input() * 2.0);
  CHECK(f.trace_count() == 2);  // the first entry's own copy still says 2
}

namespace static_keys {
// A class kiln cannot see into declares itself a value; its == and hash are used.
class Opaque {
 public:
  KILN_STATIC_VALUE(Opaque);
  explicit Opaque(int k = 1) : k_(k) {}
  int k() const { return k_; }
  friend bool operator==(const Opaque&, const Opaque&) = default;
  template <class H>
  friend H AbslHashValue(H h, const Opaque& o) {
    return H::combine(std::move(h), o.k_);
  }

 private:
  int k_;
};
}  // namespace static_keys

TEST_CASE("declared values, variants and sets are static values") {
  auto f = filter_jit([](const Array& x, const Opaque& o,
                         const Static<std::variant<int, double>>& v,
                         const Static<std::set<int>>& s) {
    const double scale = std::holds_alternative<int>(*v) ? std::get<int>(*v) : std::get<double>(*v);
    return x * (static_cast<double>(o.k()) * scale + static_cast<double>(s->size()));
  });
  using V = Static<std::variant<int, double>>;
  using S = Static<std::set<int>>;
  check_same(f(input(), Opaque(2), V{3}, S{{1, 2}}), input() * 8.0);
  check_same(f(input(), Opaque(2), V{3.0}, S{{1, 2}}), input() * 8.0);  // int -> double
  check_same(f(input(), Opaque(3), V{3.0}, S{{1, 2}}), input() * 11.0);
  check_same(f(input(), Opaque(3), V{3.0}, S{{1, 2, 3}}), input() * 12.0);
  check_same(f(input(), Opaque(3), V{3.0}, S{{1, 2, 3}}), input() * 12.0);
  CHECK(f.trace_count() == 4);
}

TEST_CASE("unordered containers are one key for equal contents, whatever their order") {
  auto f = filter_jit([](const Array& x, const Static<std::unordered_set<int>>& s,
                         const Static<std::unordered_map<std::string, double>>& m) {
    double total = 0;
    for (int v : *s) total += v;
    return x * (total + m->at("scale"));
  });
  std::unordered_set<int> up, down;
  for (int i = 0; i < 64; ++i) up.insert(i * 7);
  down.rehash(8);
  for (int i = 63; i >= 0; --i) down.insert(i * 7);
  // The premise: equal sets that iterate in different orders.
  REQUIRE(up == down);
  REQUIRE(!std::equal(up.begin(), up.end(), down.begin()));
  const std::unordered_map<std::string, double> m{{"scale", 0.5}, {"unused", -0.0}};
  using S = Static<std::unordered_set<int>>;
  using M = Static<std::unordered_map<std::string, double>>;
  const double total = 7.0 * 63 * 64 / 2;
  check_same(f(input(), S{up}, M{m}), input() * (total + 0.5));
  check_same(f(input(), S{down}, M{m}), input() * (total + 0.5));
  CHECK(f.trace_count() == 1);
  // A different element, and a float value by bits (-0.0 -> 0.0), are new keys.
  std::unordered_set<int> other = up;
  other.erase(7);
  other.insert(8);
  check_same(f(input(), S{other}, M{m}), input() * (total + 1.5));
  CHECK(f.trace_count() == 2);
  std::unordered_map<std::string, double> m2 = m;
  m2["unused"] = 0.0;
  check_same(f(input(), S{up}, M{m2}), input() * (total + 0.5));
  CHECK(f.trace_count() == 3);
  CHECK(f.last_retrace().find("static value changed") != std::string::npos);
}

namespace static_keys {
// Not an aggregate (it has a constructor): a field left out of KILN_MODULE is
// a compile error (tests/compile_fail/module_class_leaves_out_field.cpp)
// unless KILN_NOT_IN_TREE names it. Such a field is None after grad/filter_jit.
struct Block {
  Block() = default;
  Block(Array f, Array p) : fc(std::move(f)), proj(std::move(p)) {}
  Array fc;
  Array proj;
  KILN_MODULE(Block, fc);
  KILN_NOT_IN_TREE(proj);
  Array operator()(const Array& x) const { return sum(x * fc * proj); }
};
}  // namespace static_keys

TEST_CASE("a field marked KILN_NOT_IN_TREE is None inside grad, and the error says so") {
  const Block blk(array<float>({1.0f, 2.0f, 3.0f}), array<float>({1.0f, 1.0f, 1.0f}));
  CHECK(blk(input()).item<float>() == doctest::Approx(-1.5f));  // eager: fine
  auto loss = [](const Block& b, const Array& x) { return b(x); };
  CHECK_THROWS_WITH_AS(value_and_grad(loss)(blk, input()),
                       doctest::Contains("[multiply] argument 2 is None (a null Array; a "
                                         "field left out of its struct's KILN_MODULE(...) "
                                         "is None after grad or filter_jit)"),
                       ValueError);
}

// ---- issue 34: two C++ types never share a key ----
namespace static_keys {
// A number per C++ type, so that a program traced for one type and run for
// another shows in the result.
template <class T>
constexpr float tag_of() {
  if constexpr (detail::kIs<T, std::pair>) return 1.0f;
  else if constexpr (detail::kIs<T, std::tuple>) return 2.0f;
  else if constexpr (detail::kIs<T, std::vector>) return 3.0f + tag_of<typename T::value_type>();
  else if constexpr (detail::IsStdArrayType<T>::value) return 4.0f;
  else if constexpr (detail::kIs<T, std::optional>) return 10.0f * (1.0f + tag_of<typename T::value_type>());
  else if constexpr (std::is_same_v<T, int>) return 100.0f;
  else if constexpr (std::is_same_v<T, float>) return 200.0f;
  else if constexpr (std::is_same_v<T, Array>) return 300.0f;
  else return 0.0f;
}
// tag_of<T>() + the sum of every array leaf.
Array tagged_sum(const auto& t) {
  Array out = scalar(tag_of<std::remove_cvref_t<decltype(t)>>());
  for (const Array& leaf : tree::leaves(t)) out = out + sum(leaf);
  return out;
}
}  // namespace static_keys

TEST_CASE("standard containers of different C++ types are different keys, with the types named") {
  const Array a = array<float>({1.0f, 2.0f});
  const Array b = array<float>({3.0f, 4.0f});
  auto f = filter_jit([](const auto& t) { return tagged_sum(t); });
  CHECK(f(std::pair{a, b}).item<float>() == 11.0f);
  CHECK(f(std::tuple{a, b}).item<float>() == 12.0f);
  CHECK(f.trace_count() == 2);
  CHECK(f.last_retrace().find(
            "arg0: type changed, std::pair<Array, Array> -> std::tuple<Array, Array>") !=
        std::string::npos);
  CHECK(f(std::vector{a, b}).item<float>() == 313.0f);
  CHECK(f(std::array{a, b}).item<float>() == 14.0f);
  CHECK(f.trace_count() == 4);
  {
    // With one cached key the explanation is against it (with several, against
    // the nearest, which ties may pick).
    auto g = filter_jit([](const auto& t) { return tagged_sum(t); });
    CHECK(g(std::vector{a, b}).item<float>() == 313.0f);
    CHECK(g(std::array{a, b}).item<float>() == 14.0f);
    CHECK(g.last_retrace().find("arg0: type changed, std::vector<Array> -> std::array<Array, 2>") !=
          std::string::npos);
  }
  // Empty containers and optionals: the element type is in the key.
  CHECK(f(std::optional<int>()).item<float>() == 1010.0f);
  CHECK(f(std::optional<float>()).item<float>() == 2010.0f);
  CHECK(f(std::vector<int>()).item<float>() == 103.0f);
  CHECK(f(std::vector<float>()).item<float>() == 203.0f);
  CHECK(f.trace_count() == 8);
  // An engaged optional is not its value.
  CHECK(f(std::optional<int>(3)).item<float>() == 1010.0f);
  CHECK(f(3).item<float>() == 100.0f);
  CHECK(f(std::optional<Array>(a)).item<float>() == 3013.0f);
  CHECK(f(a).item<float>() == 303.0f);
  CHECK(f.trace_count() == 12);
  // Every key is still a hit.
  CHECK(f(std::pair{a, b}).item<float>() == 11.0f);
  CHECK(f(std::optional<float>()).item<float>() == 2010.0f);
  CHECK(f(3).item<float>() == 100.0f);
  CHECK(f.trace_count() == 12);
}

TEST_CASE("a nested optional keeps an empty inner optional apart from an empty outer one") {
  using O = std::optional<std::optional<int>>;
  auto f = filter_jit([](const O& o) {
    return scalar(!o.has_value() ? 0.0f : !o->has_value() ? 1.0f : 2.0f + static_cast<float>(**o));
  });
  CHECK(f(O(std::optional<int>())).item<float>() == 1.0f);  // first call: traced right
  CHECK(f(O()).item<float>() == 0.0f);
  CHECK(f(O(5)).item<float>() == 7.0f);
  CHECK(f(O(std::optional<int>())).item<float>() == 1.0f);
  CHECK(f.trace_count() == 3);
}

TEST_CASE("donation: only non-const rvalues donate; a donated array is an error everywhere") {
  auto twice = filter_jit([](Array x) { return x * 2.0f; });
  const Array c = array<float>({1.0f, 2.0f});
  CHECK(twice(std::move(c)).to_vector<float>() == std::vector<float>{2.0f, 4.0f});  // NOLINT
  CHECK(!c.is_donated());  // std::move of a const object leaves it with the caller
  CHECK(c.to_vector<float>() == std::vector<float>{1.0f, 2.0f});
  CHECK(twice(std::move(c)).to_vector<float>() == std::vector<float>{2.0f, 4.0f});  // a hit
  CHECK(!c.is_donated());

  Array d = array<float>({1.0f, 2.0f}) + 0.0f;
  const Array kept = d;  // a handle to d, to see what donation did
  CHECK(twice(std::move(d)).to_vector<float>() == std::vector<float>{2.0f, 4.0f});
  // `kept` shares d's array, so d was not the only way to reach it: not donated.
  CHECK(!kept.is_donated());

  Array gone = array<float>({1.0f, 2.0f}) + 0.0f;
  CHECK(twice(std::move(gone)).to_vector<float>() == std::vector<float>{2.0f, 4.0f});
  REQUIRE(gone.is_donated());  // NOLINT(bugprone-use-after-move): the point
  CHECK_THROWS_WITH_AS(to_device(gone, Device::cpu()),
                       doctest::Contains("[to_device] the array (f32(2,)) was donated"),
                       ValueError);
  CHECK_THROWS_WITH_AS(to_device(gone, default_device()), doctest::Contains("was donated"),
                       ValueError);
  CHECK_THROWS_WITH_AS(gone.to_vector<float>(), doctest::Contains("was donated"), ValueError);
  CHECK_THROWS_WITH_AS(gone + 1.0f, doctest::Contains("was donated"), ValueError);
  std::ostringstream os;
  CHECK_THROWS_WITH_AS(os << gone, doctest::Contains("[print] the array (f32(2,)) was donated"),
                       ValueError);
  const auto path = std::filesystem::temp_directory_path() / "kiln_donated_checkpoint.kiln";
  CHECK_THROWS_WITH_AS(save_checkpoint(path, std::vector<Array>{gone}),
                       doctest::Contains("[save_checkpoint] [0] (f32(2,)) was donated"),
                       ValueError);
  CHECK(!std::filesystem::exists(path));
}

TEST_CASE("to_device refuses None, tracers and escaped tracers by name") {
  CHECK_THROWS_WITH_AS(to_device(Array(), Device::cpu()),
                       doctest::Contains("[to_device] got a null Array"), ValueError);
  Array escaped;
  auto f = filter_jit([&escaped](const Array& x) {
    CHECK_THROWS_WITH_AS(to_device(x, Device::cpu()),
                         doctest::Contains("[to_device] cannot read a traced array"),
                         ValueError);
    escaped = x;
    return x + 1.0f;
  });
  (void)f(array<float>({1.0f}));
  CHECK_THROWS_WITH_AS(to_device(escaped, Device::cpu()),
                       doctest::Contains("[to_device] cannot read a traced array"), ValueError);
}

TEST_CASE("a call without array arguments is keyed on the default device") {
  auto f = filter_jit([](int n) { return full(Shape{n}, 1.0f); });
  const Device first = default_device();
  CHECK(f(2).device() == first);
  CHECK(f.trace_count() == 1);
  // Checked where the default device is a Vulkan one (jit-vulkan), with the CPU
  // as the other: jit-cpu would bring lavapipe up mid-suite, whose driver leaks
  // 48 bytes at exit that LeakSanitizer reports under scripts/test --sanitize.
  if (first == Device::cpu()) {
    MESSAGE("checked with a Vulkan default device and the CPU");
    return;
  }
  const Device other = Device::cpu();
  set_default_device(other);
  const Array on_other = f(2);
  set_default_device(first);
  CHECK(on_other.device() == other);
  CHECK(f.trace_count() == 2);
  CHECK(f.last_retrace().find("device: ") != std::string::npos);
  CHECK(f(2).device() == first);
  CHECK(f.trace_count() == 2);
}

TEST_CASE("an array passed twice, once donated, stays with the caller") {
  auto add = filter_jit([](Array x, Array y) { return x + y; });
  for (int call = 0; call < 2; ++call) {  // the trace, then the hit path
    Array a = array<float>({1.0f, 2.0f}) + 0.0f;
    CHECK(add(std::move(a), a).to_vector<float>() == std::vector<float>{2.0f, 4.0f});
    CHECK(!a.is_donated());  // NOLINT(bugprone-use-after-move): the point
    CHECK(a.to_vector<float>() == std::vector<float>{1.0f, 2.0f});
  }
  CHECK(add.trace_count() == 1);
}

TEST_CASE("an array captured on another device is copied to where the program runs") {
  const Device here = default_device();
  if (here == Device::cpu()) {  // see the default-device test
    MESSAGE("checked with a Vulkan default device, capturing a CPU array");
    return;
  }
  const Device other = Device::cpu();
  const Array captured = to_device(array<float>({1.0f, 2.0f, 3.0f}), other);
  auto f = filter_jit([captured](const Array& x) { return x * captured + 1.0f; });
  const Array out = f(to_device(array<float>({2.0f, 2.0f, 2.0f}), here));
  CHECK(out.device() == here);
  CHECK(out.to_vector<float>() == std::vector<float>{3.0f, 5.0f, 7.0f});
  CHECK(f(to_device(array<float>({1.0f, 1.0f, 1.0f}), here)).to_vector<float>() ==
        std::vector<float>{2.0f, 3.0f, 4.0f});
  CHECK(f.trace_count() == 1);
}
