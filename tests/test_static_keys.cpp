// filter_jit keys that cannot go stale (issue 15): struct identity is the C++
// type, floats compare by bits (bare, wrapped, inside containers and structs),
// statics are copies, and a changed struct static is explained with its values.
// Every decision is checked against eager results. Device-generic (KILN_DEVICE).
// The refusals (pointers, smart pointers, references, views, capturing lambdas,
// forgotten or incomplete KILN_MODULE) are compile errors: tests/compile_fail.
#include <doctest/doctest.h>

#include <cmath>
#include <kiln/kiln.hpp>
#include <limits>
#include <map>
#include <set>
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
  CHECK(f.last_retrace().find("arg0: type_name changed, expected static_keys::Pow<2>, "
                              "got static_keys::Pow<3>") != std::string::npos);
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
  CHECK(f.last_retrace().find("expected a::Linear, got b::Linear") != std::string::npos);
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
// Not an aggregate (it has a constructor), so kiln cannot count its fields at
// compile time: `proj` left out of the registration is caught at run time.
struct Block {
  Block() = default;
  Block(Array f, Array p) : fc(std::move(f)), proj(std::move(p)) {}
  Array fc;
  Array proj;
  KILN_MODULE(Block, fc);
  Array operator()(const Array& x) const { return sum(x * fc * proj); }
};
}  // namespace static_keys

TEST_CASE("a field left out of KILN_MODULE in a class with constructors is named in the error") {
  const Block blk(array<float>({1.0f, 2.0f, 3.0f}), array<float>({1.0f, 1.0f, 1.0f}));
  CHECK(blk(input()).item<float>() == doctest::Approx(-1.5f));  // eager: fine
  auto loss = [](const Block& b, const Array& x) { return b(x); };
  CHECK_THROWS_WITH_AS(value_and_grad(loss)(blk, input()),
                       doctest::Contains("[multiply] argument 2 is None (a null Array; a "
                                         "field left out of its struct's KILN_MODULE(...) "
                                         "is None after grad or filter_jit)"),
                       ValueError);
}
