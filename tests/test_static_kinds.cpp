// The cache-key rule for every kind of static leaf, enumerated from the code: the
// test walks StaticKind up to kCount, and the switch below has no default, so a
// new kind does not compile (-Werror=switch) until it has a sample here. An
// accepted kind is checked through filter_jit: an equal value hits (through the
// in-place hit path and the table lookup), a different value retraces, the trace
// sees exactly the value passed, and results equal eager ones. A refused kind
// names the tests/compile_fail snippet that proves its diagnostic, and a sample
// type of that kind is checked at compile time. Device-generic (KILN_DEVICE).
#include <doctest/doctest.h>
#include <variant>
#include <complex>
#include <chrono>
#include <any>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <kiln/kiln.hpp>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

using namespace kiln;
using detail::StaticKind;

namespace static_kinds {

Array input() { return array<float>({1.0f, -2.0f, 0.5f}); }

void check_twice(const Array& got) {
  const auto x = got.to_vector<float>();
  const auto want = (input() * 2.0).to_vector<float>();
  CHECK(x == want);
}

// a and same are equal statics, other differs (and may be of another type).
template <class A, class B>
void check_key_rule(const A& a, const A& same, const B& other, std::string_view why) {
  static_assert(StaticLeaf<A> && StaticLeaf<B>);
  int traced_a = 0, traced_other = 0;
  auto f = filter_jit([&](const Array& x, const auto& s) {
    using S = std::remove_cvref_t<decltype(s)>;
    if constexpr (std::is_same_v<A, B>) {
      if (detail::static_equal(s, a)) ++traced_a;
      else traced_other += detail::static_equal(s, other) ? 1 : 100;
    } else if constexpr (std::is_same_v<S, A>) {
      ++traced_a;
    } else {
      ++traced_other;
    }
    return x * 2.0;
  });
  check_twice(f(input(), a));
  CHECK(f.trace_count() == 1);
  check_twice(f(input(), same));  // hit: compared in place with the last entry
  CHECK(f.trace_count() == 1);
  check_twice(f(input(), other));
  CHECK(f.trace_count() == 2);
  INFO(f.last_retrace());
  CHECK(f.last_retrace().find(why) != std::string::npos);
  check_twice(f(input(), same));  // hit: found in the table
  CHECK(f.trace_count() == 2);
  CHECK(f.cache_size() == 2);
  CHECK(traced_a == 1);  // each trace saw the value it was keyed on
  CHECK(traced_other == 1);
}

Array fa(const Array& x) { return x; }
Array fb(const Array& x) { return -x; }

struct Cfg {
  int k = 2;
  double scale = 0.5;
  friend bool operator==(const Cfg&, const Cfg&) = default;
  template <class H>
  friend H AbslHashValue(H h, const Cfg& c) {
    return H::combine(std::move(h), c.k, c.scale);
  }
};

enum class Mode { kTrain, kEval };

// An empty base (a tag, a mixin of functions) leaves a struct a plain value.
struct Tag {
  friend bool operator==(const Tag&, const Tag&) = default;
};
struct Tagged : Tag {
  int k = 2;
  double scale = 0.5;
  friend bool operator==(const Tagged&, const Tagged&) = default;
  template <class H>
  friend H AbslHashValue(H h, const Tagged& c) {
    return H::combine(std::move(h), c.k, c.scale);
  }
};

// Bit-fields: refused in a struct compared field by field (kiln cannot name
// them), accepted in one that declares itself a value.
struct Quant {
  int bits : 5;
  float scale;
};
struct Packed {
  int bits : 5;
  bool symmetric : 1;
  KILN_STATIC_VALUE(Packed);
  friend bool operator==(const Packed&, const Packed&) = default;
  template <class H>
  friend H AbslHashValue(H h, const Packed& p) {
    return H::combine(std::move(h), static_cast<int>(p.bits), static_cast<bool>(p.symmetric));
  }
};

// What aggregate.hpp's bit_field finds, and what it must not mistake for one.
enum class Small : std::uint8_t { kA, kB };
struct Narrow { int level : 3; int other; };            // by value
struct TwoFlags { bool a : 1; bool b : 1; };            // by size
struct NarrowEnum { Small s : 2; int k; };              // an enum, by value
struct Wide { std::uint64_t big : 40; double d; };      // 64-bit, by value
struct Padded { char c; int i; short s; };              // padding is not packing
struct WithEmpty { [[no_unique_address]] Tag t; int i; };
struct ConstField { int a; const int b = 3; };
struct Texts { int n; std::string s; std::vector<int> v; };
static_assert(detail::bit_field<Narrow>() && detail::bit_field<TwoFlags>() &&
              detail::bit_field<NarrowEnum>() && detail::bit_field<Wide>());
static_assert(!detail::bit_field<Padded>() && !detail::bit_field<WithEmpty>() &&
              !detail::bit_field<ConstField>() && !detail::bit_field<Texts>() &&
              !detail::bit_field<Cfg>());

template <class T>
constexpr StaticKind kind = detail::static_kind<T>();

// A refused kind: a sample type of that kind, and the snippet that shows its
// diagnostic (run by the static-compile-fail test).
void check_refused(std::string_view snippet) {
  const char* dir = std::getenv("KILN_COMPILE_FAIL_DIR");
  REQUIRE_MESSAGE(dir != nullptr, "KILN_COMPILE_FAIL_DIR is not set (tests/meson.build sets it)");
  CHECK_MESSAGE(std::filesystem::exists(std::filesystem::path(dir) / snippet),
                "missing compile-fail snippet " << snippet);
}

void check_kind(StaticKind k) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  switch (k) {
    case StaticKind::kValue:
      static_assert(kind<int> == StaticKind::kValue && kind<std::string> == StaticKind::kValue);
      check_key_rule(3, 3, 4, "static value changed: 3 -> 4");
      check_key_rule(Mode::kTrain, Mode::kTrain, Mode::kEval,
                     "static_kinds::Mode(0) -> static_kinds::Mode(1)");
      check_key_rule(std::string("relu"), std::string("relu"), std::string("gelu"),
                     "\"relu\" -> \"gelu\"");
      return;
    case StaticKind::kFloat:
      static_assert(kind<double> == StaticKind::kFloat && kind<float> == StaticKind::kFloat);
      check_key_rule(0.0, 0.0, -0.0, "static value changed: 0 -> -0");
      check_key_rule(nan, nan, 1.0, "static value changed: nan -> 1");
      check_key_rule(0.5f, 0.5f, 0.25f, "static value changed: 0.5 -> 0.25");
      return;
    case StaticKind::kComposite:
      static_assert(kind<Cfg> == StaticKind::kComposite);
      check_key_rule(Static<Cfg>{Cfg{2, 0.0}}, Static<Cfg>{Cfg{2, 0.0}},
                     Static<Cfg>{Cfg{2, -0.0}}, "static_kinds::Cfg{k=2, scale=0} -> "
                                                 "static_kinds::Cfg{k=2, scale=-0}");
      check_key_rule(Static<std::vector<double>>{{1.0, nan}}, Static<std::vector<double>>{{1.0, nan}},
                     Static<std::vector<double>>{{1.0, 2.0}}, "[1, nan] -> [1, 2]");
      // Standard value types (issue 34): complex and durations by bits, a
      // variant by alternative index (one type twice included).
      static_assert(kind<std::complex<double>> == StaticKind::kComposite &&
                    kind<std::chrono::duration<double>> == StaticKind::kComposite);
      check_key_rule(std::complex<double>(1.0, 0.0), std::complex<double>(1.0, 0.0),
                     std::complex<double>(1.0, -0.0), "(1 + 0i) -> (1 - 0i)");
      check_key_rule(std::chrono::duration<double, std::milli>(2.5),
                     std::chrono::duration<double, std::milli>(2.5),
                     std::chrono::duration<double, std::milli>(3.0), "2.5ms -> 3ms");
      check_key_rule(std::chrono::seconds(2), std::chrono::seconds(2), std::chrono::seconds(3),
                     "2s -> 3s");
      static_assert(kind<Tagged> == StaticKind::kComposite);
      check_key_rule(Tagged{{}, 2, 0.0}, Tagged{{}, 2, 0.0}, Tagged{{}, 2, -0.0},
                     "static_kinds::Tagged{k=2, scale=0} -> static_kinds::Tagged{k=2, scale=-0}");
      using Twice = std::variant<double, double>;
      check_key_rule(Static<Twice>{Twice(std::in_place_index<1>, 1.0)},
                     Static<Twice>{Twice(std::in_place_index<1>, 1.0)},
                     Static<Twice>{Twice(std::in_place_index<0>, 1.0)}, "static value changed");
      return;
    case StaticKind::kFunctionPointer:
      check_key_rule(&fa, &fa, &fb, "callable identity changed: static_kinds::fa -> "
                                    "static_kinds::fb");
      return;
    case StaticKind::kStateless: {
      auto square = [](const Array& x) { return x * x; };
      auto cube = [](const Array& x) { return x * x * x; };
      static_assert(kind<decltype(square)> == StaticKind::kStateless);
      check_key_rule(square, square, cube, "callable identity changed");
      return;
    }
    case StaticKind::kRejectStdFunction:
      static_assert(kind<std::function<void()>> == StaticKind::kRejectStdFunction);
      return check_refused("std_function_field.cpp");
    case StaticKind::kRejectCapturingLambda: {
      auto scaled = [n = 2.0](const Array& x) { return x * n; };
      static_assert(kind<decltype(scaled)> == StaticKind::kRejectCapturingLambda);
      return check_refused("capturing_lambda_field.cpp");
    }
    case StaticKind::kRejectCallable:
      return check_refused("stateful_functor_field.cpp");
    case StaticKind::kRejectPointer:
      static_assert(kind<const double*> == StaticKind::kRejectPointer);
      return check_refused("pointer_field.cpp");
    case StaticKind::kRejectCArray:
      static_assert(kind<char[5]> == StaticKind::kRejectCArray);
      return check_refused("string_literal_argument.cpp");
    case StaticKind::kRejectBitField:
      static_assert(kind<Quant> == StaticKind::kRejectBitField && kind<Packed> == StaticKind::kValue);
      check_key_rule(Packed{4, true}, Packed{4, true}, Packed{3, true}, "static value changed");
      return check_refused("bit_field_in_static.cpp");
    case StaticKind::kRejectSmartPointer:
      static_assert(kind<std::shared_ptr<const Cfg>> == StaticKind::kRejectSmartPointer);
      return check_refused("shared_ptr_argument.cpp");
    case StaticKind::kRejectReference:
      static_assert(kind<std::reference_wrapper<double>> == StaticKind::kRejectReference);
      return check_refused("reference_wrapper_argument.cpp");
    case StaticKind::kRejectView:
      static_assert(kind<std::span<const float>> == StaticKind::kRejectView &&
                    kind<std::string_view> == StaticKind::kRejectView);
      return check_refused("span_field.cpp");
    case StaticKind::kRejectIterator:
      static_assert(kind<std::vector<int>::const_iterator> == StaticKind::kRejectIterator);
      return check_refused("iterator_field.cpp");
    case StaticKind::kRejectArray:
      static_assert(kind<Array> == StaticKind::kRejectArray);
      return check_refused("array_inside_static.cpp");
    case StaticKind::kRejectAny:
      static_assert(kind<std::any> == StaticKind::kRejectAny);
      return check_refused("std_any_field.cpp");
    case StaticKind::kRejectUnregistered:
      return check_refused("forgotten_module.cpp");
    case StaticKind::kRejectOpaque:
      return check_refused("opaque_static_class.cpp");
    case StaticKind::kRejectMissing:
      return check_refused("hash_without_equality.cpp");
    case StaticKind::kRejectPart:
      static_assert(kind<Static<std::vector<const int*>>> == StaticKind::kRejectPart &&
                    kind<std::vector<const int*>> == StaticKind::kRejectPart);
      return check_refused("struct_holding_pointer.cpp");
    case StaticKind::kCount:
      FAIL("kCount is not a kind");
      return;
  }
  FAIL("StaticKind " << static_cast<int>(k) << " has no case");
}

}  // namespace static_kinds

using namespace static_kinds;

TEST_CASE("every kind of static leaf keys the jit cache by its rule, or is refused") {
  for (int k = 0; k < static_cast<int>(StaticKind::kCount); ++k) {
    CAPTURE(k);
    check_kind(static_cast<StaticKind>(k));
  }
}
