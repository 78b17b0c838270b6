// Tracing into a Program: printing, evaluation, and the DCE/CSE/folding passes.
#include <doctest/doctest.h>

#include <kiln/dsl/backend.hpp>
#include <kiln/dsl/executable.hpp>
#include <kiln/dsl/program.hpp>
#include <kiln/dsl/trace.hpp>
#include <kiln/kiln.hpp>

#include <cmath>
#include <type_traits>
#include <vector>

using namespace kiln;

namespace {

Program trace2(Array (*f)(const Array&, const Array&), const Aval& a, const Aval& b) {
  Trace t;
  Array x = t.input(a, default_device(), "x");
  Array y = t.input(b, default_device(), "y");
  Array out = f(x, y);
  return t.finish(std::span<const Array>(&out, 1));
}

Array affine_sum(const Array& x, const Array& y) { return sum(x * y + 2.0f); }

}  // namespace

TEST_CASE("a traced function prints like a jaxpr, with input paths") {
  Program p = trace2(affine_sum, {f32, {2, 3}}, {f32, {3}});
  CHECK(to_string(p) ==
        "{ lambda ; a:f32[2,3] (x) b:f32[3] (y). let\n"
        "    c:f32[2,3] = multiply a b\n"
        "    d:f32[] = full[value=2 device=" +
            default_device().to_string() + "]\n"
        "    e:f32[2,3] = add c d\n"
        "    f:f32[] = sum[axes=(0, 1)] e\n"
        "  in (f) }");
}

TEST_CASE("folding turns scalar creation into constants that print their value") {
  Program p = trace2(affine_sum, {f32, {2, 3}}, {f32, {3}});
  optimize(p);
  CHECK(to_string(p) ==
        "{ lambda d:f32[]=2 ; a:f32[2,3] (x) b:f32[3] (y). let\n"
        "    c:f32[2,3] = multiply a b\n"
        "    e:f32[2,3] = add c d\n"
        "    f:f32[] = sum[axes=(0, 1)] e\n"
        "  in (f) }");
}

TEST_CASE("a program evaluates to the same values as the eager function") {
  Program p = trace2(affine_sum, {f32, {2, 3}}, {f32, {3}});
  Array x = array<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Array y = array<float>({1, 0, -1});
  std::vector<Array> out = eval(p, std::vector<Array>{x, y});
  REQUIRE(out.size() == 1);
  CHECK(out[0].item<float>() == affine_sum(x, y).item<float>());
  CHECK(out[0].item<float>() == doctest::Approx((1 - 3 + 4 - 6) + 12));
}

TEST_CASE("evaluating a program with a wrong input names the input and both avals") {
  Program p = trace2(affine_sum, {f32, {2, 3}}, {f32, {3}});
  Array x = zeros({2, 3});
  Array y = zeros({4});
  CHECK_THROWS_WITH_AS(eval(p, std::vector<Array>{x, y}),
                       "[eval] y: expected f32[3], got f32[4]", ValueError);
}

TEST_CASE("dead code is removed and common subexpressions are merged") {
  auto f = [](const Array& x, const Array&) {
    Array unused = log(x);
    (void)unused;
    return sum(exp(x) + exp(x));
  };
  Trace t;
  Array x = t.input({f32, {3}}, default_device(), "x");
  Array y = t.input({f32, {3}}, default_device(), "y");
  Array out = f(x, y);
  Program p = t.finish(std::span<const Array>(&out, 1));
  CHECK(p.equations.size() == 5);  // log, exp, exp, add, sum
  eliminate_dead_code(p);
  CHECK(p.equations.size() == 4);
  eliminate_common_subexpressions(p);
  CHECK(to_string(p) ==
        "{ lambda ; a:f32[3] (x) b:f32[3] (y). let\n"
        "    d:f32[3] = exp a\n"
        "    f:f32[3] = add d d\n"
        "    g:f32[] = sum[axes=(0)] f\n"
        "  in (g) }");
}

TEST_CASE("equations differing only in a parameter are not merged, and every Params field counts") {
  // Fills of 0.0 and -0.0: equal as doubles, different results (1/x gives
  // +inf and -inf). CSE keys on Params' ==, which compares floats by bits.
  Trace t;
  Array x = t.input({f32, {3}}, default_device(), "x");
  const Array pos = 1.0f / full({3}, 0.0, f32, default_device());
  const Array negz = 1.0f / full({3}, -0.0, f32, default_device());
  const Array outs[] = {x + pos, x + negz};
  Program p = t.finish(outs);
  eliminate_common_subexpressions(p);
  std::size_t fills = 0, unit = 0;  // the two 1.0 scalars are one equation
  for (const Equation& e : p.equations) {
    if (e.prim != Prim::kFull) continue;
    (p.avals[e.output].shape == Shape{3} ? fills : unit) += 1;
  }
  CHECK(fills == 2);
  CHECK(unit == 1);
  auto jf = filter_jit([](const Array& a) {
    return std::tuple{a / full({3}, 0.0, f32, a.device()), a / full({3}, -0.0, f32, a.device())};
  });
  auto [plus, minus] = jf(ones({3}));
  CHECK(plus.to_vector<float>() == std::vector<float>(3, INFINITY));
  CHECK(minus.to_vector<float>() == std::vector<float>(3, -INFINITY));

  // Each field of each parameter struct on its own makes two Params differ
  // (== and hash), and no two structs compare equal: the rule walks the
  // alternatives of ParamsVariant and their fields, so neither a new struct
  // nor a new field can be left out of the key.
  const auto each_struct = [&]<std::size_t... I>(std::index_sequence<I...>, auto&& f) {
    (f(std::type_identity<std::variant_alternative_t<I, ParamsVariant>>{}), ...);
  };
  constexpr std::size_t kStructs = std::variant_size_v<ParamsVariant>;
  std::size_t structs = 0;
  // Built in place and changed in place: GCC 12 warns, with the sanitizers at
  // -O1, that a copied or moved empty InlinedVector "may be used uninitialized".
  each_struct(std::make_index_sequence<kStructs>(), [&](auto tag) {
    using S = typename decltype(tag)::type;
    const Params base(std::in_place_type<S>);
    ++structs;
    each_struct(std::make_index_sequence<kStructs>(), [&](auto other_tag) {
      using O = typename decltype(other_tag)::type;
      if constexpr (!std::is_same_v<O, S>) {
        const Params other(std::in_place_type<O>);
        CHECK_FALSE(other == base);
        CHECK(absl::HashOf(other) != absl::HashOf(base));
      }
    });
    const std::size_t n = detail::kFieldCount<S>;
    for (std::size_t field = 0; field < n; ++field) {
      Params other(std::in_place_type<S>);
      std::size_t index = 0;
      detail::for_each_field(other.as<S>(), [&](auto& f) {
        if (index++ != field) return;
        using T = std::remove_cvref_t<decltype(f)>;
        if constexpr (std::is_same_v<T, bool>) {
          f = !f;
        } else if constexpr (std::is_same_v<T, double>) {
          f = -f;  // 0.0 -> -0.0, 1.0 -> -1.0
        } else if constexpr (std::is_same_v<T, DType>) {
          f = f == f32 ? i32 : f32;
        } else if constexpr (std::is_same_v<T, Device>) {
          f = Device::vulkan(3);
        } else if constexpr (std::is_integral_v<T>) {
          f = f + 1;
        } else if constexpr (std::is_same_v<T, ProgramRef>) {
          f = std::make_shared<const Program>();  // another program (identity)
        } else if constexpr (std::is_same_v<T, std::vector<ProgramRef>>) {
          f.push_back(std::make_shared<const Program>());
        } else {
          f.push_back(1);  // Axes, Shape
        }
      });
      CAPTURE(to_string(base));
      CAPTURE(field);
      CHECK_FALSE(other == base);
      CHECK(absl::HashOf(other) != absl::HashOf(base));
      CHECK(cache_key(other) != cache_key(base));
    }
  });
  CHECK(structs == kStructs);
}

TEST_CASE("each primitive's row names the parameter struct its bindings carry") {
  // bind<P> takes ParamsOf<P> only (a compile error otherwise); the untyped
  // bind checks at run time, for programs replayed from equations.
  static_assert(std::is_same_v<ParamsOf<Prim::kSum>, ReduceParams>);
  static_assert(std::is_same_v<ParamsOf<Prim::kSlice>, SliceParams>);
  static_assert(std::is_same_v<ParamsOf<Prim::kAdd>, NoParams>);
  const Array x = ones({2, 3});
  const Array in[] = {x};
  CHECK_THROWS_WITH_AS(detail::bind(Prim::kSum, Params{AxisParams{0}}, in, Aval{f32, {3}}),
                       doctest::Contains("[kiln internal] a binding holds parameter struct"),
                       Error);
  CHECK(detail::bind(Prim::kSum, Params{ReduceParams{{0}, false}}, in, Aval{f32, {3}})
            .to_vector<float>() == std::vector<float>{2, 2, 2});
}

TEST_CASE("arrays from outside the trace become constants; reading a tracer is an error") {
  Array w = array<float>({1, 2, 3});
  Trace t;
  Array x = t.input({f32, {3}}, default_device(), "x");
  CHECK(is_tracer(x));
  CHECK_FALSE(is_tracer(w));
  CHECK_THROWS_WITH_AS(x.to_vector<float>(), doctest::Contains("[to_vector] cannot read a traced array"),
                       ValueError);
  Array out = sum(x * w);
  Program p = t.finish(std::span<const Array>(&out, 1));
  CHECK(p.constants.size() == 1);
  CHECK(p.constant_values[0].same(w));
  CHECK(eval(p, std::vector<Array>{array<float>({1, 1, 1})})[0].item<float>() == 6.0f);
}

TEST_CASE("program and trace misuse gives errors that say what is wrong") {
  Program p = trace2(affine_sum, {f32, {2, 3}}, {f32, {3}});
  CHECK_THROWS_WITH_AS(eval(p, std::vector<Array>{zeros({2, 3})}),
                       "[eval] program takes 2 inputs, got 1", ValueError);
  Trace outer;
  Array x = outer.input({f32, {}}, default_device(), "x");
  {
    Trace inner;
    CHECK_THROWS_WITH_AS(outer.finish(std::span<const Array>(&x, 1)),
                         "[trace] finish() called on a trace that is not the innermost active one",
                         Error);
  }
  CHECK(outer.finish(std::span<const Array>(&x, 1)).outputs.size() == 1);
}

TEST_CASE("constants print with their value, one-element arrays too") {
  Array w = array<float>({2.5f});
  Trace t;
  Array x = t.input({f32, {1}}, default_device(), "x");
  Array out = x * w;
  CHECK(to_string(t.finish(std::span<const Array>(&out, 1))) ==
        "{ lambda b:f32[1]=[2.5] ; a:f32[1] (x). let\n"
        "    c:f32[1] = multiply a b\n"
        "  in (c) }");
}

TEST_CASE("layout simplification: transposes compose, identities disappear") {
  Trace t;
  const Array x = t.input(Aval{DType::kF32, {2, 3, 4}}, default_device(), "x");
  const Array a = transpose(transpose(x, {1, 0, 2}), {1, 0, 2});  // identity
  const Array b = transpose(transpose(x, {2, 0, 1}), {0, 2, 1});  // one transpose
  const Array c = reshape(reshape(x, {6, 4}), {24});              // one reshape
  const Array d = reshape(x, {2, 3, 4});                          // nothing recorded
  Program p = t.finish(std::vector<Array>{a, b, c, d});
  optimize(p);
  REQUIRE(p.equations.size() == 2);
  CHECK(p.outputs[0] == p.inputs[0]);
  CHECK(p.outputs[3] == p.inputs[0]);
  CHECK(p.equations[0].prim == Prim::kTranspose);
  CHECK(p.equations[0].params.as<TransposeParams>().perm == Axes{2, 1, 0});
  CHECK(p.avals[p.equations[0].output].shape == Shape{4, 3, 2});
  CHECK(p.equations[1].prim == Prim::kReshape);
  CHECK(p.equations[1].inputs[0] == p.inputs[0]);
  // The values agree with the unsimplified eager computation.
  const Array xv = reshape(arange(24, DType::kF32), {2, 3, 4});
  const std::vector<Array> out = eval(p, std::vector<Array>{xv});
  CHECK(out[1].to_vector<float>() ==
        transpose(transpose(xv, {2, 0, 1}), {0, 2, 1}).to_vector<float>());
  CHECK(out[2].to_vector<float>() == xv.to_vector<float>());
}

TEST_CASE("transposes of the last two axes fold into matmul, with the same values") {
  Trace t;
  const Array a = t.input(Aval{DType::kF32, {3, 4}}, default_device(), "a");
  const Array b = t.input(Aval{DType::kF32, {5, 4}}, default_device(), "b");
  const Array c = t.input(Aval{DType::kF32, {2, 4, 3}}, default_device(), "c");
  const Array ab = matmul(a, transpose(b));                      // transpose_b
  const Array ba = transpose(matmul(a, transpose(b)));           // (a b^T)^T = b a^T
  const Array ca = matmul(transpose(c, {0, 2, 1}), transpose(a));  // both, batched
  Program p = t.finish(std::vector<Array>{ab, ba, ca});
  optimize(p);
  int matmuls = 0;
  for (const Equation& eq : p.equations) {
    CHECK(eq.prim == Prim::kMatmul);  // every transpose folded away
    ++matmuls;
  }
  CHECK(matmuls == 3);
  CHECK(to_string(p).find("matmul[transpose_b=true] a b") != std::string::npos);
  CHECK(to_string(p).find("matmul[transpose_b=true] b a") != std::string::npos);
  CHECK(to_string(p).find("matmul[transpose_a=true transpose_b=true] c a") != std::string::npos);
  const Array av = reshape(arange(12, DType::kF32), {3, 4}) * 0.5;
  const Array bv = reshape(arange(20, DType::kF32), {5, 4}) - 3.0;
  const Array cv = reshape(arange(24, DType::kF32), {2, 4, 3}) * 0.25;
  const std::vector<Array> out = eval(p, std::vector<Array>{av, bv, cv});
  CHECK(out[0].to_vector<float>() == matmul(av, transpose(bv)).to_vector<float>());
  CHECK(out[1].to_vector<float>() == transpose(matmul(av, transpose(bv))).to_vector<float>());
  CHECK(out[2].to_vector<float>() ==
        matmul(transpose(cv, {0, 2, 1}), transpose(av)).to_vector<float>());
}

namespace {
// Counts program scopes; runs nothing.
class ScopeCounter final : public Backend {
 public:
  Device device() const override { return Device::cpu(); }
  std::shared_ptr<Buffer> eval(Prim, const Params&, std::span<const Array>,
                               const Aval&) override {
    return nullptr;
  }
  Array from_host(const Array& host) override { return host; }
  void begin_program() override { ++begun; }
  void end_program() override {
    ++ended;
    if (fail_end) throw DeviceError("end failed");
  }
  int begun = 0, ended = 0;
  bool fail_end = false;
};
}  // namespace

TEST_CASE("ProgramScope ends the program once: on end(), or when an exception unwinds") {
  ScopeCounter b;
  {
    ProgramScope scope(b);
    CHECK(b.begun == 1);
    scope.end();
    scope.end();  // no second end
  }
  CHECK(b.ended == 1);
  CHECK_THROWS_AS(([&] {
                    ProgramScope scope(b);
                    throw ValueError("step failed");
                  }()),
                  ValueError);
  CHECK(b.begun == 2);
  CHECK(b.ended == 2);
  // An error of end_program propagates from end(), but not over another exception.
  b.fail_end = true;
  CHECK_THROWS_AS(([&] {
                    ProgramScope scope(b);
                    scope.end();
                  }()),
                  DeviceError);
  CHECK_THROWS_AS(([&] {
                    ProgramScope scope(b);
                    throw ValueError("step failed");
                  }()),
                  ValueError);
  CHECK(b.ended == 4);
}

TEST_CASE("a compiled program runs (inside a program scope) on the default device") {
  Program p = trace2(affine_sum, {f32, {2, 3}}, {f32, {3}});
  const Executable e(p, default_device(), "affine_sum");
  std::vector<Array> in = {
      to_device(Array::from_data<float>(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}), default_device()),
      to_device(Array::from_data<float>(std::vector<float>{1, 0, -1}, {3}), default_device())};
  const std::vector<Array> out = e.run(in);
  CHECK(out[0].item<float>() == doctest::Approx(8.0));
}
