// Greedy elementwise fusion over a program in order, then anchors. An equation joins the open
// group of one of its inputs when it is fusible and has the group's iteration
// shape; when it reads several such open groups, they merge into one (their
// members move to the position of the joining equation, which is legal because
// nothing outside an open group has read its values yet). A group closes as soon
// as an equation outside it reads one of its values: the group runs at the
// position of its last member, so every outside reader must come after that
// member. Then a group may take one anchor: the matmul whose result it reads
// (an epilogue: bias, activation) or a reduction of one of its values (a
// prologue). Values a group computes that are read outside it (or are program
// outputs) become its outputs; the rest never leave the kernel. Before the
// anchors, where the backend runs them, a convolution's unfold and fold go
// into the matmuls next to them (find_windows: implicit GEMM).
#include "kiln/dsl/fusion.hpp"

#include <algorithm>
#include <optional>
#include <sstream>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "kiln/dsl/backend.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln {

std::shared_ptr<const void> KernelCache::find(std::uint64_t key) const {
  const std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [k, v] : entries_) {
    if (k == key) return v;
  }
  return nullptr;
}

std::shared_ptr<const void> KernelCache::insert(std::uint64_t key,
                                                std::shared_ptr<const void> value) const {
  const std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [k, v] : entries_) {
    if (k == key) return v;  // another thread made it first
  }
  entries_.emplace_back(key, value);
  return value;
}

const char* name(FusedKernel::Kind kind) {
  switch (kind) {
    case FusedKernel::Kind::kElementwise: return "";
    case FusedKernel::Kind::kMatmulEpilogue: return "matmul_epilogue";
    case FusedKernel::Kind::kReducePrologue: return "reduce_prologue";
    case FusedKernel::Kind::kUnfoldMatmul: return "unfold_matmul";
    case FusedKernel::Kind::kMatmulFold: return "matmul_fold";
  }
  return "?";
}

bool fusible(Prim prim) {
  switch (family(prim)) {
    case PrimFamily::kUnary:
    case PrimFamily::kBinary:
    case PrimFamily::kWhere:
    case PrimFamily::kAstype:
    case PrimFamily::kIdentity:
      return true;
    case PrimFamily::kReduce: case PrimFamily::kArgReduce: case PrimFamily::kScan:
    case PrimFamily::kSort: case PrimFamily::kMatmul: case PrimFamily::kLayout:
    case PrimFamily::kWindow:
    case PrimFamily::kIndex: case PrimFamily::kCreation: case PrimFamily::kControl:
      return false;
  }
  return false;
}

namespace {

struct Group {
  Shape shape;
  std::vector<std::size_t> members;  // elementwise equation indices, in order
  bool open = true;
  int anchor = -1;  // a fused matmul (before members) or reduction (after them)
  FusedKernel::Kind kind = FusedKernel::Kind::kElementwise;
};

bool is_reduction(Prim p) { return p == Prim::kSum || p == Prim::kMax || p == Prim::kMin; }

// The step of a kernel made of equations `order` of `p` (in order), of kind
// `kind` and iteration shape `shape`, whose body outputs are the values
// `leaves(v)` selects.
template <class Leaves>
Step kernel_step(const Program& p, const std::vector<std::size_t>& order, FusedKernel::Kind kind,
                 const Shape& shape, Leaves&& leaves) {
  auto kernel = std::make_shared<FusedKernel>();
  kernel->shape = shape;
  kernel->kind = kind;
  Program& body = kernel->body;
  absl::flat_hash_map<ValueId, ValueId> local;
  Step s;
  auto local_of = [&](ValueId v) {
    auto it = local.find(v);
    if (it != local.end()) return it->second;
    const ValueId id = body.new_value(p.avals[v]);
    body.inputs.push_back(id);
    s.inputs.push_back(v);
    local.emplace(v, id);
    return id;
  };
  for (std::size_t m : order) {
    const Equation& member = p.equations[m];
    Equation copy{member.prim, member.params, {}, 0};
    for (ValueId in : member.inputs) copy.inputs.push_back(local_of(in));
    const ValueId out = body.new_value(p.avals[member.output]);
    copy.output = out;
    local.emplace(member.output, out);
    body.equations.push_back(std::move(copy));
    if (leaves(member.output)) {
      body.outputs.push_back(out);
      s.outputs.push_back(member.output);
    }
  }
  s.kernel = std::move(kernel);
  return s;
}

// The equations an implicit-GEMM kernel run at one equation takes in: an
// unfold and its reshape before a matmul, or a matmul and its reshape before
// a fold.
struct GemmWindow {
  std::optional<FusedKernel::Kind> kind;
  absl::InlinedVector<std::size_t, 2> taken;  // in program order
};

bool is_output(const Program& p, ValueId v) {
  return std::find(p.outputs.begin(), p.outputs.end(), v) != p.outputs.end();
}

// kUnfoldMatmul: an unfold whose columns (directly or through reshapes that
// only matmuls read) are read only by matmuls, each through one operand, goes
// into every one of those matmuls' kernels. kMatmulFold: a matmul whose
// result (directly or through one reshape) only a fold reads goes into the
// fold's kernel. Nothing absorbed is a program output, and a matmul takes at
// most one unfold and is never both kinds.
void find_windows(const Program& p, const std::vector<std::vector<std::size_t>>& readers,
                  const std::vector<int>& producer, std::vector<GemmWindow>& windows,
                  std::vector<bool>& absorbed) {
  const std::size_t n = p.equations.size();
  const auto reads_once = [&](std::size_t m, ValueId v) {
    const Equation& eq = p.equations[m];
    return eq.prim == Prim::kMatmul && (eq.inputs[0] == v) != (eq.inputs[1] == v) &&
           !windows[m].kind;
  };
  for (std::size_t u = 0; u < n; ++u) {
    const Equation& eq = p.equations[u];
    if (eq.prim != Prim::kUnfold || is_output(p, eq.output) || readers[eq.output].empty()) {
      continue;
    }
    // (matmul, reshape or -1) for every reader of the columns.
    std::vector<std::pair<std::size_t, int>> uses;
    bool ok = true;
    for (std::size_t r : readers[eq.output]) {
      const Equation& re = p.equations[r];
      if (reads_once(r, eq.output)) {
        uses.emplace_back(r, -1);
        continue;
      }
      ok = re.prim == Prim::kReshape && !is_output(p, re.output) && !readers[re.output].empty();
      if (!ok) break;
      for (std::size_t m : readers[re.output]) {
        ok = ok && reads_once(m, re.output);
        uses.emplace_back(m, static_cast<int>(r));
      }
      if (!ok) break;
    }
    // A matmul reading the columns twice (through two reshapes) keeps them.
    for (std::size_t a = 0; ok && a < uses.size(); ++a) {
      for (std::size_t b = a + 1; b < uses.size(); ++b) ok = ok && uses[a].first != uses[b].first;
    }
    if (!ok) continue;
    absorbed[u] = true;
    for (const auto& [m, r] : uses) {
      windows[m].kind = FusedKernel::Kind::kUnfoldMatmul;
      windows[m].taken = {u};
      if (r >= 0) {
        absorbed[static_cast<std::size_t>(r)] = true;
        windows[m].taken.push_back(static_cast<std::size_t>(r));
      }
    }
  }
  const auto only_reader = [&](ValueId v, std::size_t e) {
    return !is_output(p, v) && readers[v].size() == 1 && readers[v][0] == e;
  };
  for (std::size_t f = 0; f < n; ++f) {
    const Equation& eq = p.equations[f];
    if (eq.prim != Prim::kFold) continue;
    ValueId v = eq.inputs[0];
    std::size_t reader = f;
    int j = producer[v];
    int reshape = -1;
    if (j >= 0 && p.equations[static_cast<std::size_t>(j)].prim == Prim::kReshape &&
        only_reader(v, f)) {
      reshape = j;
      reader = static_cast<std::size_t>(j);
      v = p.equations[static_cast<std::size_t>(j)].inputs[0];
      j = producer[v];
    }
    if (j < 0 || p.equations[static_cast<std::size_t>(j)].prim != Prim::kMatmul ||
        windows[static_cast<std::size_t>(j)].kind || !only_reader(v, reader)) {
      continue;
    }
    windows[f].kind = FusedKernel::Kind::kMatmulFold;
    windows[f].taken = {static_cast<std::size_t>(j)};
    absorbed[static_cast<std::size_t>(j)] = true;
    if (reshape >= 0) {
      windows[f].taken.push_back(static_cast<std::size_t>(reshape));
      absorbed[static_cast<std::size_t>(reshape)] = true;
    }
  }
}

}  // namespace

std::vector<Step> fuse(const Program& p, const FusionOptions& options) {
  const std::size_t n = p.equations.size();
  std::vector<int> group_of_value(p.num_values(), -1);
  std::vector<int> group_of_eq(n, -1);
  std::vector<Group> groups;
  if (options.enabled) {
    for (std::size_t i = 0; i < n; ++i) {
      const Equation& eq = p.equations[i];
      const Shape& shape = p.avals[eq.output].shape;
      int join = -1;
      if (fusible(eq.prim)) {
        for (ValueId in : eq.inputs) {
          int g = group_of_value[in];
          if (g < 0 || g == join || !groups[g].open || groups[g].shape != shape) continue;
          if (join < 0) {
            join = g;
            continue;
          }
          // Merge the smaller group into the larger one.
          if (groups[g].members.size() > groups[join].members.size()) std::swap(g, join);
          for (std::size_t m : groups[g].members) {
            group_of_eq[m] = join;
            group_of_value[p.equations[m].output] = join;
          }
          std::vector<std::size_t>& into = groups[join].members;
          const auto mid = static_cast<std::ptrdiff_t>(into.size());
          into.insert(into.end(), groups[g].members.begin(), groups[g].members.end());
          std::inplace_merge(into.begin(), into.begin() + mid, into.end());
          groups[g].members.clear();
          groups[g].open = false;
        }
      }
      // Every other group this equation reads from now has an outside reader.
      for (ValueId in : eq.inputs) {
        const int g = group_of_value[in];
        if (g >= 0 && g != join) groups[g].open = false;
      }
      if (join < 0 && fusible(eq.prim)) {
        join = static_cast<int>(groups.size());
        groups.push_back(Group{shape, {}, true});
      }
      if (join >= 0) {
        groups[join].members.push_back(i);
        group_of_eq[i] = join;
        group_of_value[eq.output] = join;
      }
    }
  }
  std::vector<std::vector<std::size_t>> readers(p.num_values());
  std::vector<int> producer(p.num_values(), -1);
  for (std::size_t i = 0; i < n; ++i) {
    for (ValueId in : p.equations[i].inputs) readers[in].push_back(i);
    producer[p.equations[i].output] = static_cast<int>(i);
  }
  // Implicit-GEMM halves (kUnfoldMatmul, kMatmulFold): windows[i] names the
  // equations the kernel run at equation i takes in; absorbed equations run
  // only inside those kernels.
  std::vector<GemmWindow> windows(n);
  std::vector<bool> absorbed(n, false);
  if (options.enabled && options.windows) find_windows(p, readers, producer, windows, absorbed);
  if (options.enabled && options.anchors) {
    // Matmul epilogues: a group takes the matmul whose result it reads (with the
    // group's shape) when every other reader of that result comes after the
    // group's last member, where the kernel now runs.
    for (std::size_t g = 0; g < groups.size(); ++g) {
      Group& grp = groups[g];
      if (grp.members.empty()) continue;
      const std::size_t last = grp.members.back();
      for (std::size_t m = 0; m < grp.members.size() && grp.anchor < 0; ++m) {
        for (ValueId in : p.equations[grp.members[m]].inputs) {
          const int j = producer[in];
          if (j < 0 || p.equations[j].prim != Prim::kMatmul || group_of_eq[j] >= 0 ||
              absorbed[j] || windows[j].kind || p.avals[in].shape != grp.shape) {
            continue;
          }
          bool ok = true;
          for (std::size_t e : readers[in]) {
            ok = ok && (group_of_eq[e] == static_cast<int>(g) || e > last);
          }
          if (!ok) continue;
          grp.anchor = j;
          grp.kind = FusedKernel::Kind::kMatmulEpilogue;
          group_of_eq[j] = static_cast<int>(g);
          group_of_value[in] = static_cast<int>(g);
          break;
        }
      }
    }
    // Reduction prologues: a sum/max/min of a group's value joins the group
    // (which then runs at the reduction) when nothing outside the group reads
    // its values before the reduction.
    for (std::size_t i = 0; i < n; ++i) {
      const Equation& eq = p.equations[i];
      if (!is_reduction(eq.prim) || group_of_eq[i] >= 0) continue;
      const int g = group_of_value[eq.inputs[0]];
      if (g < 0 || groups[g].anchor >= 0) continue;
      bool ok = true;
      for (std::size_t m : groups[g].members) {
        for (std::size_t e : readers[p.equations[m].output]) {
          ok = ok && (group_of_eq[e] == g || e >= i);
        }
      }
      if (!ok) continue;
      groups[g].anchor = static_cast<int>(i);
      groups[g].kind = FusedKernel::Kind::kReducePrologue;
      group_of_eq[i] = g;
      group_of_value[eq.output] = g;
    }
  }
  // Values read outside their group (or returned) leave the kernel.
  std::vector<bool> escapes(p.num_values(), false);
  for (ValueId v : p.outputs) escapes[v] = true;
  for (std::size_t i = 0; i < n; ++i) {
    for (ValueId in : p.equations[i].inputs) {
      if (group_of_value[in] >= 0 && group_of_value[in] != group_of_eq[i]) escapes[in] = true;
    }
  }
  std::vector<Step> steps;
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < n; ++i) {
    const Equation& eq = p.equations[i];
    const int g = group_of_eq[i];
    if (absorbed[i]) continue;
    if (windows[i].kind) {
      order.assign(windows[i].taken.begin(), windows[i].taken.end());
      order.push_back(i);
      steps.push_back(kernel_step(p, order, *windows[i].kind, p.avals[eq.output].shape,
                                  [&](ValueId v) { return v == eq.output; }));
      continue;
    }
    if (g < 0 || (groups[g].members.size() == 1 && groups[g].anchor < 0)) {
      Step s;
      s.equation = &eq;
      s.inputs.assign(eq.inputs.begin(), eq.inputs.end());
      for (ValueId v : outputs_of(eq)) s.outputs.push_back(v);
      steps.push_back(std::move(s));
      continue;
    }
    const Group& grp = groups[g];
    // The group runs at its last member (a prologue: at its reduction).
    const std::size_t at = grp.kind == FusedKernel::Kind::kReducePrologue
                               ? static_cast<std::size_t>(grp.anchor)
                               : grp.members.back();
    if (i != at) continue;
    order.clear();
    if (grp.kind == FusedKernel::Kind::kMatmulEpilogue) order.push_back(grp.anchor);
    order.insert(order.end(), grp.members.begin(), grp.members.end());
    if (grp.kind == FusedKernel::Kind::kReducePrologue) order.push_back(grp.anchor);
    steps.push_back(kernel_step(p, order, grp.kind, grp.shape,
                                [&](ValueId v) { return escapes[v]; }));
  }
  return steps;
}

std::string to_string(const Program& p, const std::vector<Step>& steps) {
  std::ostringstream os;
  os << "compiled program: " << steps.size() << " launches\n";
  std::size_t k = 0;
  for (const Step& s : steps) {
    os << "  [" << k++ << "] ";
    if (s.equation != nullptr) {
      Program one;
      one.avals = p.avals;
      one.inputs = s.inputs;
      one.equations = {*s.equation};
      one.outputs = s.outputs;
      std::string text = to_string(one);
      os << text.substr(text.find("let\n") + 4, text.find("\n  in") - text.find("let\n") - 4)
         << "\n";
    } else {
      const char* kind = name(s.kernel->kind);
      os << "fused[shape=(" << detail::join(s.kernel->shape, ", ") << ")" << (*kind ? " " : "")
         << kind << "] "
         << to_string(s.kernel->body) << "\n";
    }
  }
  return os.str();
}

std::vector<std::shared_ptr<Buffer>> Backend::eval_fused(
    const FusedKernel& k, std::span<const Array> inputs,
    std::span<const std::shared_ptr<Buffer>> /*into*/) {
  const Program& b = k.body;
  std::vector<Array> env(b.num_values());
  for (std::size_t i = 0; i < inputs.size(); ++i) env[b.inputs[i]] = inputs[i];
  absl::InlinedVector<Array, 3> args;
  for (const Equation& eq : b.equations) {
    args.clear();
    for (ValueId in : eq.inputs) args.push_back(env[in]);
    const Aval& out = b.avals[eq.output];
    env[eq.output] = Array(out.dtype, out.shape, eval(eq.prim, eq.params, args, out));
  }
  std::vector<std::shared_ptr<Buffer>> out;
  out.reserve(b.outputs.size());
  for (ValueId v : b.outputs) out.push_back(env[v].buffer());
  return out;
}

}  // namespace kiln
