// Control flow: tracing bodies into closed sub-programs, binding the kControl
// primitives, and running them (one driver for eager calls and compiled steps).
#include "kiln/dsl/control.hpp"

#include <algorithm>

#include "kiln/dsl/control_run.hpp"
#include "kiln/dsl/trace.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln {
namespace detail {

std::string str_cat_path(std::string_view op, std::string_view path, std::string_view what) {
  return str_cat("[", op, "] ", path.empty() ? std::string_view("<root>") : path, what);
}

std::vector<std::string> prefixed(std::string_view prefix, const TreeDef& def) {
  std::vector<std::string> out = tree::paths(def);
  for (std::string& p : out) {
    p = p.empty() ? std::string(prefix) : str_cat(prefix, p.front() == '[' ? "" : ".", p);
  }
  return out;
}

std::vector<Aval> avals_of(std::span<const Array> leaves, std::string_view /*op*/,
                           std::span<const std::string> /*paths*/) {
  std::vector<Aval> out;
  out.reserve(leaves.size());
  for (const Array& a : leaves) out.push_back(a.aval());
  return out;
}

Device device_of(std::span<const Array> a, std::span<const Array> b) {
  if (!a.empty()) return a.front().device();
  if (!b.empty()) return b.front().device();
  return default_device();
}

std::int64_t scan_length(std::optional<std::int64_t> length, std::span<const Array> xs,
                         std::span<const std::string> paths) {
  std::optional<std::int64_t> n = length;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    if (xs[i].ndim() == 0) {
      throw ShapeError(str_cat_path(
          "scan", paths[i], " is a scalar; every xs leaf needs a leading axis to scan over"));
    }
    const std::int64_t lead = xs[i].shape()[0];
    if (n.has_value() && *n != lead) {
      throw ShapeError(str_cat_path(
          "scan", paths[i],
          str_cat(" has leading extent ", lead, " but ",
                  length.has_value() ? "length is " : "the first xs leaf has ", *n,
                  "; every xs leaf is scanned along axis 0 the same number of times")));
    }
    n = lead;
  }
  if (!n.has_value()) {
    throw ValueError("[scan] xs has no arrays: pass length to say how many iterations to run");
  }
  if (*n < 0) throw ValueError(str_cat("[scan] length must be >= 0, got ", *n));
  return *n;
}

void check_carry(std::string_view op, std::string_view what, const TreeDef& in_def,
                 std::span<const Aval> in_avals, const TreeDef& out_def, std::span<const Array> out,
                 bool allow_none) {
  if (!(in_def == out_def)) {
    std::vector<tree::Difference> d = tree::diff(in_def, out_def);
    if (allow_none) {
      std::erase_if(
          d, [](const tree::Difference& x) { return x.kind == tree::DiffKind::kNoneVsArray; });
    }
    if (!d.empty()) {
      throw TreeError(str_cat("[", op, "] ", what,
                              " must keep the structure it was given; it differs at:\n",
                              tree::format_diff(d)));
    }
    if (allow_none) return;  // avals are checked slot by slot by the caller
  }
  const std::vector<std::string> paths = tree::paths(in_def);
  const bool carry = what == "carry";
  for (std::size_t i = 0; i < out.size() && i < in_avals.size(); ++i) {
    if (out[i].aval() == in_avals[i]) continue;
    const std::string path = paths[i].empty() ? std::string("<root>") : paths[i];
    const std::string got = str_cat(name(out[i].dtype()), to_string(out[i].shape()));
    const std::string want = str_cat(name(in_avals[i].dtype), to_string(in_avals[i].shape));
    throw ShapeError(
        carry ? str_cat("[", op, "] carry ", path, ": the body returned ", got,
                        " but the carry went in as ", want,
                        "; a carry keeps its shape and dtype from one iteration to the next")
              : str_cat("[", op, "] ", what, " ", path, ": got ", got, ", expected ", want));
  }
}

std::vector<Array> fill_cotangents(std::string_view op, const TreeDef& def,
                                   std::span<const Aval> avals, Device device,
                                   const TreeDef& got_def, std::span<const Array> got) {
  check_carry(op, "bwd's cotangents (vs the arguments)", def, avals, got_def, got, true);
  if (got_def == def) {
    check_carry(op, "bwd's cotangents (vs the arguments)", def, avals, got_def, got);
    return std::vector<Array>(got.begin(), got.end());
  }
  // Slot by slot: an argument's array slot takes the cotangent there, or zeros.
  std::vector<Array> want_slots(def.num_slots());
  {
    std::vector<Array> marks;
    for (const Aval& a : avals) marks.push_back(zeros({}, a.dtype, device));
    want_slots = expand_slots(def, marks);
  }
  const std::vector<Array> got_slots = expand_slots(got_def, got);
  std::vector<Array> out;
  for (std::size_t s = 0; s < want_slots.size(); ++s) {
    if (want_slots[s].is_null()) continue;
    const Aval& want = avals[out.size()];
    const Array& g = got_slots[s];
    if (g.is_null()) {
      out.push_back(zeros(want.shape, want.dtype, device));
    } else if (g.aval() != want) {
      throw ShapeError(str_cat("[", op, "] bwd returned a cotangent ", name(g.dtype()),
                               to_string(g.shape()), " for an argument of ", name(want.dtype),
                               to_string(want.shape)));
    } else {
      out.push_back(g);
    }
  }
  return out;
}

ClosedBody trace_body(std::string_view op, FlatBody f, std::span<const Aval> in, Device device,
                      std::span<const std::string> names) {
  Program p;
  {
    Trace t(str_cat(op, " body"));
    std::vector<Array> tracers;
    tracers.reserve(in.size());
    for (std::size_t i = 0; i < in.size(); ++i) {
      tracers.push_back(t.input(in[i], device, i < names.size() ? names[i] : std::string()));
    }
    const std::vector<Array> outs = f(tracers);
    for (const Array& o : outs) {
      if (o.is_null()) throw ValueError(str_cat("[", op, "] the body returned None"));
    }
    p = t.finish(outs);
  }
  optimize(p);
  // Closure conversion: tracers of enclosing traces the body used become its
  // leading inputs (the equation's operands); concrete arrays stay constants.
  ClosedBody out;
  std::vector<ValueId> hoisted, consts;
  std::vector<Array> const_values;
  for (std::size_t i = 0; i < p.constants.size(); ++i) {
    if (is_tracer(p.constant_values[i])) {
      hoisted.push_back(p.constants[i]);
      out.hoisted.push_back(p.constant_values[i]);
    } else {
      consts.push_back(p.constants[i]);
      const_values.push_back(p.constant_values[i]);
    }
  }
  p.constants = std::move(consts);
  p.constant_values = std::move(const_values);
  p.inputs.insert(p.inputs.begin(), hoisted.begin(), hoisted.end());
  p.input_names.insert(p.input_names.begin(), hoisted.size(), std::string("<closure>"));
  out.program = std::make_shared<const Program>(std::move(p));
  return out;
}

namespace {

std::vector<Array> concat(std::span<const Array> a, std::span<const Array> b,
                          std::span<const Array> c = {}) {
  std::vector<Array> out(a.begin(), a.end());
  out.insert(out.end(), b.begin(), b.end());
  out.insert(out.end(), c.begin(), c.end());
  return out;
}

std::vector<Aval> output_avals(const Program& p, std::size_t from = 0) {
  std::vector<Aval> out;
  for (std::size_t i = from; i < p.outputs.size(); ++i) out.push_back(p.avals[p.outputs[i]]);
  return out;
}

}  // namespace

std::vector<Aval> scan_output_avals(const ScanLoopParams& q) {
  const Program& b = *q.body;
  std::vector<Aval> out = output_avals(b);
  for (std::size_t i = static_cast<std::size_t>(q.num_carry); i < out.size(); ++i) {
    out[i].shape.insert(out[i].shape.begin(), q.length);
  }
  if (q.save_carries) {
    for (std::int64_t j = 0; j < q.num_carry; ++j) {
      Aval a = b.avals[b.inputs[static_cast<std::size_t>(q.num_consts + j)]];
      a.shape.insert(a.shape.begin(), q.length);
      out.push_back(std::move(a));
    }
  }
  return out;
}

std::vector<Array> scan_flat(const ClosedBody& body, std::span<const Array> init,
                             std::span<const Array> xs, std::int64_t length, bool reverse) {
  ScanLoopParams q{body.program,
                   length,
                   static_cast<std::int64_t>(body.hoisted.size()),
                   static_cast<std::int64_t>(init.size()),
                   reverse,
                   false};
  const std::vector<Aval> outs = scan_output_avals(q);
  return bind_multi(Prim::kScanLoop, Params(std::move(q)), concat(body.hoisted, init, xs), outs);
}

std::vector<Array> while_flat(const ClosedBody& cond, const ClosedBody& body,
                              std::span<const Array> init) {
  // The guarded step: both bodies inlined, the carry kept where go is false.
  const std::size_t ncc = cond.hoisted.size(), nbc = body.hoisted.size(), nc = init.size();
  std::vector<Aval> step_in;
  for (const Array& a : cond.hoisted) step_in.push_back(a.aval());
  for (const Array& a : body.hoisted) step_in.push_back(a.aval());
  step_in.emplace_back();  // go: bool[] (built in place: GCC 12 warns on a moved empty Shape)
  step_in.back().dtype = DType::kBool;
  for (const Array& a : init) step_in.push_back(a.aval());
  auto step_fn = [&](std::span<const Array> t) {
    const std::span<const Array> cc = t.first(ncc), bc = t.subspan(ncc, nbc),
                                 carry = t.subspan(ncc + nbc + 1, nc);
    const Array& go = t[ncc + nbc];
    std::vector<Array> args(bc.begin(), bc.end());
    args.insert(args.end(), carry.begin(), carry.end());
    const std::vector<Array> next = eval(*body.program, args);
    std::vector<Array> out{Array()};
    for (std::size_t j = 0; j < nc; ++j) out.push_back(where(go, next[j], carry[j]));
    args.assign(cc.begin(), cc.end());
    args.insert(args.end(), out.begin() + 1, out.end());
    out[0] = logical_and(go, eval(*cond.program, args)[0]);
    return out;
  };
  const ClosedBody step = trace_body("while_loop (guarded step)", step_fn, step_in,
                                     device_of(init, cond.hoisted), {});
  WhileParams q{cond.program, body.program, step.program,
                static_cast<std::int64_t>(cond.hoisted.size()),
                static_cast<std::int64_t>(body.hoisted.size())};
  const std::vector<Aval> outs = output_avals(*body.program);
  return bind_multi(Prim::kWhileLoop, Params(std::move(q)),
                    concat(cond.hoisted, body.hoisted, init), outs);
}

std::vector<Array> switch_flat(const Array& index, std::span<const ClosedBody> branches,
                               std::span<const Array> operands) {
  if (index.is_null() || index.ndim() != 0 ||
      !(index.dtype() == DType::kBool || index.dtype() == DType::kI32 ||
        index.dtype() == DType::kU32)) {
    throw ValueError(
        str_cat("[cond] the predicate / index must be a bool or integer scalar array, got ",
                index.is_null() ? std::string("None")
                                : str_cat(name(index.dtype()), to_string(index.shape()))));
  }
  // Every branch takes the operands and then every branch's closed-over
  // arrays (each ignoring the others'): one operand list for the equation.
  std::vector<Array> hoisted;
  for (const ClosedBody& b : branches)
    hoisted.insert(hoisted.end(), b.hoisted.begin(), b.hoisted.end());
  CondParams q;
  std::size_t before = 0;
  for (const ClosedBody& b : branches) {
    Program p = *b.program;
    const std::size_t own = b.hoisted.size();
    std::vector<ValueId> ins(p.inputs.begin() + static_cast<std::ptrdiff_t>(own), p.inputs.end());
    std::vector<std::string> names(p.input_names.begin() + static_cast<std::ptrdiff_t>(own),
                                   p.input_names.end());
    for (std::size_t h = 0; h < hoisted.size(); ++h) {
      const bool mine = h >= before && h < before + own;
      ins.push_back(mine ? p.inputs[h - before] : p.new_value(hoisted[h].aval()));
      names.emplace_back("<closure>");
    }
    p.inputs = std::move(ins);
    p.input_names = std::move(names);
    before += own;
    q.branches.push_back(std::make_shared<const Program>(std::move(p)));
  }
  const Array idx = index.dtype() == DType::kBool ? astype(index, DType::kI32) : index;
  const std::vector<Aval> outs = output_avals(*q.branches.front());
  std::vector<Array> inputs{idx};
  inputs.insert(inputs.end(), operands.begin(), operands.end());
  inputs.insert(inputs.end(), hoisted.begin(), hoisted.end());
  return bind_multi(Prim::kCond, Params(std::move(q)), inputs, outs);
}

std::vector<Array> call_flat(const ClosedBody& body, std::string_view name, bool remat,
                             std::span<const Array> inputs) {
  CallParams q{body.program, std::string(name), remat};
  const std::vector<Aval> outs = output_avals(*body.program);
  return bind_multi(Prim::kCall, Params(std::move(q)), concat(body.hoisted, inputs), outs);
}

std::vector<Array> custom_vjp_flat(const ClosedBody& primal, const ClosedBody& fwd,
                                   const ClosedBody& bwd, std::string_view name,
                                   std::size_t num_residuals, std::span<const Array> inputs) {
  // Closed-over arrays: the primal's become operands (their values matter);
  // fwd and bwd may not close over tracers of an enclosing trace, since no
  // cotangent could flow to them.
  if (!fwd.hoisted.empty() || !bwd.hoisted.empty()) {
    throw ValueError(str_cat("[", name,
                             "] fwd and bwd must not use traced arrays from outside (pass them "
                             "as arguments): ",
                             fwd.hoisted.size() + bwd.hoisted.size(), " such arrays found"));
  }
  if (!primal.hoisted.empty()) {
    throw ValueError(str_cat("[", name,
                             "] the function must not use traced arrays from outside (pass them "
                             "as arguments): ",
                             primal.hoisted.size(), " such arrays found"));
  }
  CustomVjpParams q{primal.program, fwd.program, bwd.program, std::string(name),
                    static_cast<std::int64_t>(num_residuals)};
  const std::vector<Aval> outs = output_avals(*primal.program);
  return bind_multi(Prim::kCustomVjp, Params(std::move(q)), inputs, outs);
}

}  // namespace detail
}  // namespace kiln
