// filter_jit's cache: keys, lookup, retrace explanations, donation, running.
#include "kiln/dsl/jit.hpp"

#include <cstdio>
#include <cstdlib>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "kiln/dsl/trace.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::detail {

namespace {

thread_local const std::string* tl_explanation = nullptr;

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0' && std::string_view(v) != "0";
}

std::size_t key_hash(const JitCall& call, Device device) {
  std::size_t h = absl::HashOf(static_cast<int>(device.kind), device.index, call.defs.size());
  for (const TreeDef& d : call.defs) h = absl::HashOf(h, d.hash());
  for (const Array& a : call.leaves) h = absl::HashOf(h, a.aval());
  return h;
}

bool matches(const JitEntry& e, const JitCall& call, std::size_t hash, Device device) {
  if (e.hash != hash || e.device != device || e.defs.size() != call.defs.size() ||
      e.avals.size() != call.leaves.size()) {
    return false;
  }
  for (std::size_t i = 0; i < e.defs.size(); ++i) {
    if (!(e.defs[i] == call.defs[i])) return false;
  }
  for (std::size_t i = 0; i < e.avals.size(); ++i) {
    if (e.avals[i] != call.leaves[i].aval()) return false;
  }
  return true;
}

std::string aval_text(const Aval& a) {
  return str_cat(name(a.dtype), "[", join(a.shape, ","), "]");
}

// The executable's inputs for one call: a handle to each leaf the program reads;
// the leaves of donated arguments give their buffers up (take_donated) when the
// argument holds the only handle to them (besides `borrowed` copies the jit
// itself holds). An array that is also reachable elsewhere (a copy of the
// model, a view, the same array in another argument) is not donated: nothing a
// caller still holds is ever invalidated.
void prepare_inputs(std::span<const Array* const> leaves, std::span<const std::size_t> first_leaf,
                    std::span<const bool> donated, const Executable& exe,
                    std::vector<Array>& inputs, long borrowed) {
  inputs.resize(leaves.size());
  bool any_donated = false;
  for (bool d : donated) any_donated = any_donated || d;
  if (!any_donated) {
    for (std::size_t i = 0; i < leaves.size(); ++i) {
      if (exe.input_used(i)) inputs[i] = *leaves[i];
    }
    return;
  }
  thread_local absl::flat_hash_set<const ArrayImpl*> kept;
  thread_local absl::flat_hash_map<const ArrayImpl*, Array> taken;
  kept.clear();
  taken.clear();
  auto range = [&](std::size_t a) { return arg_range(first_leaf, a, leaves.size()); };
  for (std::size_t a = 0; a < donated.size(); ++a) {
    if (donated[a]) continue;
    for (auto [k, end] = range(a); k < end; ++k) kept.insert(leaves[k]->impl());
  }
  for (std::size_t a = 0; a < donated.size(); ++a) {
    for (auto [k, end] = range(a); k < end; ++k) {
      const ArrayImpl* impl = leaves[k]->impl();
      if (!donated[a] || kept.contains(impl) || !leaves[k]->sole_owner(borrowed)) {
        if (exe.input_used(k)) inputs[k] = *leaves[k];
        continue;
      }
      auto [it, inserted] = taken.try_emplace(impl);
      if (inserted) it->second = take_donated(*leaves[k]);
      if (exe.input_used(k)) inputs[k] = it->second;
    }
  }
  taken.clear();  // the inputs hold the only handles now
}

}  // namespace

std::vector<const Array*>& hit_scratch() {
  thread_local std::vector<const Array*> scratch;
  return scratch;
}

void JitState::run_hit(const JitEntry& entry, std::span<const Array* const> leaves,
                       std::span<const bool> donated, std::vector<Array>& outputs) {
  const Executable& exe = *entry.executable;
  last_entry_ = &entry;
  bool any_donated = false;
  for (bool d : donated) any_donated = any_donated || d;
  if (!any_donated) {
    outputs = exe.run(leaves, &last_run_);
    return;
  }
  thread_local std::vector<Array> inputs;
  prepare_inputs(leaves, entry.first_leaf, donated, exe, inputs, 0);
  outputs = exe.run(inputs, &last_run_);
}

const std::string& current_retrace_explanation() {
  static const std::string kNone;
  return tl_explanation != nullptr ? *tl_explanation : kNone;
}

void throw_too_many_traces(std::string_view what, std::size_t count, std::size_t max,
                           std::string_view explanation) {
  throw RetraceError(str_cat("[assert_max_traces] ", what, " was traced ", count,
                             " times, more than the allowed ", max,
                             explanation.empty() ? std::string()
                                                 : str_cat("; this trace: ", explanation)));
}

JitState::JitState(JitOptions options)
    : options_(std::move(options)), log_retraces_(env_flag("KILN_LOG_RETRACES")) {
  if (const char* v = std::getenv("KILN_FUSION")) {
    if (std::string_view(v) == "0") options_.fusion.enabled = false;
    if (std::string_view(v) == "elementwise") options_.fusion.anchors = false;
  }
}
JitState::~JitState() = default;

std::size_t JitState::cache_size() const { return entries_.size(); }

void JitState::clear_cache() {
  entries_.clear();
  last_entry_ = nullptr;
}

const Executable* JitState::last_executable() const {
  return last_entry_ == nullptr ? nullptr : last_entry_->executable.get();
}

std::string JitState::arg_name(std::size_t i) const {
  if (i < options_.arg_names.size()) return options_.arg_names[i];
  return str_cat("arg", i);
}

std::vector<std::string> JitState::leaf_paths(const JitCall& call) const {
  std::vector<std::string> out;
  out.reserve(call.leaves.size());
  for (std::size_t a = 0; a < call.defs.size(); ++a) {
    for (const std::string& p : tree::paths(call.defs[a])) {
      out.push_back(tree::join_path(arg_name(a), p));
    }
  }
  return out;
}

Device JitState::check_leaves(const JitCall& call) const {
  if (call.leaves.empty()) return default_device();
  const Device device = call.leaves.front().device();
  bool ok = true;
  for (const Array& a : call.leaves) {
    ok = ok && a.device() == device && !a.is_donated() && !is_tracer(a);
  }
  if (ok) return device;
  // Slow path: say which leaf, by path.
  const std::vector<std::string> paths = leaf_paths(call);
  for (std::size_t i = 0; i < call.leaves.size(); ++i) {
    const Array& leaf = call.leaves[i];
    const std::string& path = paths[i];
    check_not_donated(options_.name, leaf, path);
    if (is_tracer(leaf)) {
      throw ValueError(str_cat("[", options_.name, "] ", path,
                               " is a tracer: calling a jitted function inside grad or "
                               "another filter_jit is not supported yet; call the plain "
                               "function there"));
    }
    if (leaf.device() != device) {
      throw DeviceError(str_cat("[", options_.name, "] arguments live on different devices: ",
                                tree::display_path(paths.front()), " on ", device.to_string(),
                                ", ", tree::display_path(path), " on ",
                                leaf.device().to_string(), "; move them with to_device()"));
    }
  }
  return device;
}

std::string JitState::explain_miss(const JitCall& call, Device device) const {
  if (entries_.empty()) return str_cat(options_.name, ": first call");
  // Nearest: fewest structural differences first (an entry with the same tree
  // structure is nearer than any with another), then fewest leaf differences.
  std::vector<std::string> best;
  std::vector<std::string> paths;  // of the call's leaves, made when first needed
  std::size_t best_score = static_cast<std::size_t>(-1);
  for (const auto& e : entries_) {
    std::vector<std::string> lines;
    std::size_t structural = 0;
    if (e->device != device) {
      lines.push_back(str_cat("device: ", e->device.to_string(), " -> ", device.to_string()));
    }
    if (e->defs.size() != call.defs.size()) {
      lines.push_back(str_cat("number of arguments: ", e->defs.size(), " -> ", call.defs.size()));
    } else {
      bool same_structure = true;
      for (std::size_t a = 0; a < call.defs.size(); ++a) {
        if (e->defs[a] == call.defs[a]) continue;
        same_structure = false;
        for (const tree::Difference& d : tree::diff(e->defs[a], call.defs[a])) {
          ++structural;
          lines.push_back(str_cat(tree::join_path(arg_name(a), d.path), ": ",
                                  tree::name(d.kind), " changed, ", d.description));
        }
      }
      if (same_structure) {
        if (paths.empty()) paths = leaf_paths(call);
        for (std::size_t k = 0; k < call.leaves.size(); ++k) {
          const Aval& was = e->avals[k];
          const Aval& now = call.leaves[k].aval();
          if (was == now) continue;
          const char* what = was.dtype == now.dtype   ? "shape"
                             : was.shape == now.shape ? "dtype"
                                                      : "dtype and shape";
          lines.push_back(str_cat(paths[k], ": ", what, " changed, ", aval_text(was), " -> ",
                                  aval_text(now)));
        }
      }
    }
    if (lines.empty()) lines.push_back("(equal key with a different hash: report this)");
    const std::size_t score = (structural + (e->device != device)) * 1000000 + lines.size();
    if (score < best_score) {
      best_score = score;
      best = std::move(lines);
    }
  }
  return str_cat(options_.name, ": retrace ", trace_count_ + 1, ", the nearest of ",
                 entries_.size(), " cached ", entries_.size() == 1 ? "key" : "keys",
                 " differs at\n    ", join(best, "\n    "));
}

JitEntry& JitState::trace_and_compile(JitCall& call, std::size_t hash, Device device,
                                      TraceFn trace) {
  std::string explanation = explain_miss(call, device);
  if (trace_count_ + 1 > max_traces_) {
    throw_too_many_traces(str_cat("[", options_.name, "]"), trace_count_ + 1, max_traces_,
                          explanation);
  }
  if (log_retraces_) std::fprintf(stderr, "[filter_jit] %s\n", explanation.c_str());
  last_retrace_ = explanation;
  ++trace_count_;
  auto entry = std::make_unique<JitEntry>();
  entry->defs = call.defs;
  entry->first_leaf = call.first_leaf;
  entry->device = device;
  entry->hash = hash;
  entry->avals.reserve(call.leaves.size());
  for (const Array& a : call.leaves) entry->avals.push_back(a.aval());
  Program program;
  {
    const std::string* saved = tl_explanation;
    tl_explanation = &last_retrace_;
    struct Restore {
      const std::string* saved;
      ~Restore() { tl_explanation = saved; }
    } restore{saved};
    Trace t;
    std::vector<Array> tracers;
    tracers.reserve(call.leaves.size());
    const std::vector<std::string> paths = leaf_paths(call);
    for (std::size_t k = 0; k < call.leaves.size(); ++k) {
      tracers.push_back(t.input(call.leaves[k].aval(), device, paths[k]));
    }
    TraceResult result = trace(tracers);
    program = t.finish(result.outputs, tree::paths(result.structure));
    entry->result = std::move(result.structure);
  }
  optimize(program);
  entry->executable =
      std::make_unique<Executable>(std::move(program), device, options_.name, options_.fusion);
  if (env_flag("KILN_PRINT_PROGRAMS")) {
    std::fprintf(stderr, "%s\n", entry->executable->to_string().c_str());
  }
  entries_.push_back(std::move(entry));
  return *entries_.back();
}

std::pair<std::vector<Array>, const TreeDef*> JitState::call(JitCall& call, TraceFn trace) {
  const Device device = check_leaves(call);
  const std::size_t hash = key_hash(call, device);
  const JitEntry* entry = nullptr;
  for (const auto& e : entries_) {
    if (matches(*e, call, hash, device)) {
      entry = e.get();
      break;
    }
  }
  if (entry == nullptr) entry = &trace_and_compile(call, hash, device, trace);
  last_entry_ = entry;
  std::vector<const Array*> leaves;
  leaves.reserve(call.leaves.size());
  for (const Array& a : call.leaves) leaves.push_back(&a);
  std::vector<Array> inputs;
  prepare_inputs(leaves, call.first_leaf, call.donated, *entry->executable, inputs, 1);
  leaves.clear();
  call.leaves.clear();  // our handles must not keep donated buffers alive
  std::vector<Array> outputs = entry->executable->run(inputs, &last_run_);
  return {std::move(outputs), &entry->result};
}

}  // namespace kiln::detail
