// Program printing, evaluation and the optimisation passes.
#include "kiln/dsl/program.hpp"

#include <algorithm>
#include <sstream>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "kiln/dsl/trace.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln {

Program::Program() = default;
Program::Program(const Program&) = default;
Program::Program(Program&&) noexcept = default;
Program& Program::operator=(const Program&) = default;
Program& Program::operator=(Program&&) noexcept = default;
Program::~Program() = default;

ValueId Program::new_value(const Aval& aval) {
  avals.push_back(aval);
  return static_cast<ValueId>(avals.size() - 1);
}

namespace {

// a, b, ..., z, ba, bb, ... (jaxpr style)
std::string value_name(ValueId v) {
  std::string s;
  do {
    s.insert(s.begin(), static_cast<char>('a' + v % 26));
    v /= 26;
  } while (v > 0);
  return s;
}



}  // namespace

std::string to_string(const Program& p) {
  std::ostringstream os;
  auto decl = [&](ValueId v) { return value_name(v) + ":" + to_string(p.avals[v]); };
  os << "{ lambda";
  for (std::size_t i = 0; i < p.constants.size(); ++i) {
    os << " " << decl(p.constants[i]);
    const Array& c = p.constant_values[i];
    if (!is_tracer(c) && c.size() == 1) os << "=" << format_values(c);
  }
  os << " ;";
  for (std::size_t i = 0; i < p.inputs.size(); ++i) {
    os << " " << decl(p.inputs[i]);
    if (i < p.input_names.size() && !p.input_names[i].empty()) os << " (" << p.input_names[i] << ")";
  }
  os << ". let\n";
  for (const Equation& eq : p.equations) {
    os << "    " << decl(eq.output);
    for (ValueId v : eq.more_outputs) os << " " << decl(v);
    os << " = " << name(eq.prim) << to_string(eq.params);
    for (ValueId in : eq.inputs) os << " " << value_name(in);
    os << "\n";
  }
  std::vector<std::string> outs;
  for (std::size_t i = 0; i < p.outputs.size(); ++i) {
    std::string s = value_name(p.outputs[i]);
    if (i < p.output_names.size() && !p.output_names[i].empty()) s += " (" + p.output_names[i] + ")";
    outs.push_back(s);
  }
  os << "  in (" << detail::join(outs, ", ") << ") }";
  return os.str();
}

std::vector<Array> eval_all(const Program& p, std::span<const Array> inputs) {
  if (inputs.size() != p.inputs.size()) {
    throw ValueError(detail::str_cat("[eval] program takes ", p.inputs.size(),
                                     " inputs, got ", inputs.size()));
  }
  std::vector<Array> env(p.num_values());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Aval& want = p.avals[p.inputs[i]];
    if (inputs[i].is_null() || inputs[i].aval() != want) {
      const std::string got = inputs[i].is_null() ? "None" : to_string(inputs[i].aval());
      const std::string label = i < p.input_names.size() && !p.input_names[i].empty()
                                    ? p.input_names[i]
                                    : detail::str_cat("input ", i);
      throw ValueError(detail::str_cat("[eval] ", label, ": expected ", to_string(want),
                                       ", got ", got));
    }
    env[p.inputs[i]] = inputs[i];
  }
  for (std::size_t i = 0; i < p.constants.size(); ++i) env[p.constants[i]] = p.constant_values[i];
  absl::InlinedVector<Array, 3> args;
  std::vector<Aval> outs;
  for (const Equation& eq : p.equations) {
    args.clear();
    for (ValueId in : eq.inputs) args.push_back(env[in]);
    if (family(eq.prim) != PrimFamily::kControl) {
      env[eq.output] = detail::bind(eq.prim, eq.params, args, p.avals[eq.output]);
      continue;
    }
    const auto ids = outputs_of(eq);
    outs.clear();
    for (ValueId v : ids) outs.push_back(p.avals[v]);
    std::vector<Array> results = detail::bind_multi(eq.prim, eq.params, args, outs);
    for (std::size_t i = 0; i < ids.size(); ++i) env[ids[i]] = std::move(results[i]);
  }
  return env;
}

std::vector<Array> eval(const Program& p, std::span<const Array> inputs) {
  std::vector<Array> env = eval_all(p, inputs);
  std::vector<Array> out;
  out.reserve(p.outputs.size());
  for (ValueId v : p.outputs) out.push_back(env[v]);
  return out;
}

void eliminate_dead_code(Program& p) {
  std::vector<bool> live(p.num_values(), false);
  for (ValueId v : p.outputs) live[v] = true;
  std::vector<Equation> kept;
  for (auto it = p.equations.rbegin(); it != p.equations.rend(); ++it) {
    bool used = live[it->output];
    for (ValueId v : it->more_outputs) used = used || live[v];
    if (!used) continue;
    for (ValueId in : it->inputs) live[in] = true;
    kept.push_back(std::move(*it));
  }
  std::reverse(kept.begin(), kept.end());
  p.equations = std::move(kept);
  std::vector<ValueId> consts;
  std::vector<Array> values;
  for (std::size_t i = 0; i < p.constants.size(); ++i) {
    if (!live[p.constants[i]]) continue;
    consts.push_back(p.constants[i]);
    values.push_back(p.constant_values[i]);
  }
  p.constants = std::move(consts);
  p.constant_values = std::move(values);
}

namespace {

// Rewrites every use of a value through `rename` (identity where absent).
void apply_renames(Program& p, const std::vector<ValueId>& rename) {
  for (Equation& eq : p.equations) {
    for (ValueId& in : eq.inputs) in = rename[in];
  }
  for (ValueId& out : p.outputs) out = rename[out];
}

}  // namespace

void eliminate_common_subexpressions(Program& p) {
  std::vector<ValueId> rename(p.num_values());
  for (std::size_t v = 0; v < rename.size(); ++v) rename[v] = static_cast<ValueId>(v);
  absl::flat_hash_map<const ArrayImpl*, ValueId> const_ids;
  for (std::size_t i = 0; i < p.constants.size(); ++i) {
    auto [it, inserted] = const_ids.try_emplace(p.constant_values[i].impl(), p.constants[i]);
    if (!inserted) rename[p.constants[i]] = it->second;
  }
  // Two equations are one when their primitive, parameters (every field, by
  // Params' ==), output aval and inputs are equal.
  using Key = std::tuple<Prim, Params, Aval, absl::InlinedVector<ValueId, 3>>;
  absl::flat_hash_map<Key, ValueId> seen;
  std::vector<Equation> kept;
  for (Equation& eq : p.equations) {
    for (ValueId& in : eq.inputs) in = rename[in];
    if (!eq.more_outputs.empty()) {  // several results: kept as they are
      kept.push_back(std::move(eq));
      continue;
    }
    Key key{eq.prim, eq.params, p.avals[eq.output], eq.inputs};
    auto [it, inserted] = seen.try_emplace(std::move(key), eq.output);
    if (inserted) {
      kept.push_back(std::move(eq));
    } else {
      rename[eq.output] = it->second;
    }
  }
  p.equations = std::move(kept);
  apply_renames(p, rename);
  eliminate_dead_code(p);
}

void fold_scalar_constants(Program& p) {
  std::vector<Array> known(p.num_values());
  for (std::size_t i = 0; i < p.constants.size(); ++i) {
    const Array& c = p.constant_values[i];
    if (!is_tracer(c) && c.size() <= kFoldMaxElements) known[p.constants[i]] = c;
  }
  SuspendTracing eager;  // fold by running the ops now, even inside a trace
  std::vector<Equation> kept;
  for (Equation& eq : p.equations) {
    const Aval& out = p.avals[eq.output];
    // Control flow is never run at trace time (a loop could be long).
    bool foldable = numel(out.shape) <= kFoldMaxElements && family(eq.prim) != PrimFamily::kControl;
    absl::InlinedVector<Array, 3> args;
    for (ValueId in : eq.inputs) {
      foldable = foldable && !known[in].is_null();
      if (foldable) args.push_back(known[in]);
    }
    if (!foldable) {
      kept.push_back(std::move(eq));
      continue;
    }
    known[eq.output] = detail::bind(eq.prim, eq.params, args, out);
    p.constants.push_back(eq.output);
    p.constant_values.push_back(known[eq.output]);
  }
  p.equations = std::move(kept);
  eliminate_dead_code(p);
}

void simplify_layout(Program& p) {
  std::vector<ValueId> rename(p.num_values());
  for (std::size_t v = 0; v < rename.size(); ++v) rename[v] = static_cast<ValueId>(v);
  std::vector<const Equation*> producer(p.num_values(), nullptr);
  std::vector<int> uses(p.num_values(), 0);
  for (const Equation& eq : p.equations) {
    for (ValueId in : eq.inputs) ++uses[in];
  }
  for (ValueId v : p.outputs) ++uses[v];
  // A transpose that swaps the last two axes only (what matmul can absorb).
  auto swaps_last_two = [](const Equation* e) {
    if (e == nullptr || e->prim != Prim::kTranspose) return false;
    const Axes& ax = e->params.as<TransposeParams>().perm;
    const std::size_t r = ax.size();
    if (r < 2 || ax[r - 2] != static_cast<std::int64_t>(r - 1) ||
        ax[r - 1] != static_cast<std::int64_t>(r - 2)) {
      return false;
    }
    for (std::size_t i = 0; i + 2 < r; ++i) {
      if (ax[i] != static_cast<std::int64_t>(i)) return false;
    }
    return true;
  };
  std::vector<Equation> kept;
  kept.reserve(p.equations.size());
  for (Equation& eq : p.equations) {
    for (ValueId& in : eq.inputs) in = rename[in];
    if (eq.prim == Prim::kMatmul) {
      // matmul(transpose(a), b) reads a transposed instead (BLAS-style flags).
      for (int k = 0; k < 2; ++k) {
        const Equation* t = producer[eq.inputs[k]];
        if (!swaps_last_two(t)) continue;
        eq.inputs[k] = t->inputs[0];
        auto& mp = eq.params.as<MatmulParams>();
        bool& flag = k == 0 ? mp.transpose_a : mp.transpose_b;
        flag = !flag;
      }
    }
    if (eq.prim == Prim::kTranspose && swaps_last_two(&eq)) {
      // transpose(matmul(a, b)) = matmul(b^T, a^T), when nothing else reads the
      // product.
      const Equation* mm = producer[eq.inputs[0]];
      if (mm != nullptr && mm->prim == Prim::kMatmul && uses[eq.inputs[0]] == 1) {
        const auto& mp = mm->params.as<MatmulParams>();
        const MatmulParams q{!mp.transpose_b, !mp.transpose_a};
        Equation swapped{Prim::kMatmul, q, {mm->inputs[1], mm->inputs[0]}, eq.output};
        kept.push_back(std::move(swapped));
        producer[eq.output] = &kept.back();
        continue;
      }
    }
    if (eq.prim == Prim::kTranspose || eq.prim == Prim::kReshape) {
      const ValueId in = eq.inputs[0];
      const Equation* inner = producer[in];
      if (inner != nullptr && inner->prim == eq.prim) {
        if (eq.prim == Prim::kTranspose) {  // transpose(transpose(x, q), r) = transpose(x, q o r)
          Axes& perm = eq.params.as<TransposeParams>().perm;
          const Axes& first = inner->params.as<TransposeParams>().perm;
          Axes composed;
          for (auto ax : perm) composed.push_back(first[ax]);
          perm = composed;
        }
        eq.inputs[0] = inner->inputs[0];  // reshape(reshape(x)) = reshape(x)
      }
      const ValueId src = eq.inputs[0];
      bool identity = p.avals[src] == p.avals[eq.output];
      if (eq.prim == Prim::kTranspose) {
        const Axes& perm = eq.params.as<TransposeParams>().perm;
        for (std::size_t i = 0; i < perm.size(); ++i) {
          identity = identity && perm[i] == static_cast<std::int64_t>(i);
        }
      }
      if (identity) {
        rename[eq.output] = src;
        continue;
      }
    }
    kept.push_back(std::move(eq));
    producer[kept.back().output] = &kept.back();  // stable: kept never reallocates
  }
  p.equations = std::move(kept);
  apply_renames(p, rename);
  eliminate_dead_code(p);
}

void optimize(Program& p) {
  std::size_t before;
  do {
    before = p.equations.size();
    simplify_layout(p);
    eliminate_dead_code(p);
    eliminate_common_subexpressions(p);
    fold_scalar_constants(p);
  } while (p.equations.size() < before);
}

}  // namespace kiln
