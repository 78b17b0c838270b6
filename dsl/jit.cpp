// filter_jit's cache: keys, lookup, retrace explanations, donation, running.
#include "kiln/dsl/jit.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <future>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "kiln/dsl/trace.hpp"
#include "kiln/runtime/env.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::detail {

namespace {

thread_local const std::string* tl_explanation = nullptr;

bool env_flag(const char* name) { return env::flag(name).value_or(false); }

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


// What a call's donated arguments gave up: each array (now reading as
// donated) and its buffer, held so that a call that throws can give it back.
struct Donations {
  std::vector<Array> arrays;
  std::vector<std::shared_ptr<Buffer>> held;  // parallel; reset by the run once overwritten
};

// The executable's inputs for one call: a handle to each leaf the program reads;
// the leaves of donated arguments give their buffers up (take_donated) when the
// argument holds the only handle to them (besides `borrowed` copies the jit
// itself holds). An array that is also reachable elsewhere (a copy of the
// model, a view, the same array in another argument) is not donated: nothing a
// caller still holds is ever invalidated.
void prepare_inputs(std::span<const Array* const> leaves, std::span<const std::size_t> first_leaf,
                    std::span<const bool> donated, const Executable& exe,
                    std::vector<Array>& inputs, long borrowed, Donations& donations) {
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
      if (inserted) {
        it->second = take_donated(*leaves[k]);
        donations.arrays.push_back(*leaves[k]);
        donations.held.push_back(it->second.buffer());
      }
      if (exe.input_used(k)) inputs[k] = it->second;
    }
  }
  taken.clear();  // the inputs hold the only handles now
}

// Runs `exe` on inputs whose donated buffers `donations` holds. Failure
// atomicity: when the run throws, every donated argument whose buffer was not
// yet overwritten in place gets it back (Executable::run writes them only
// after its last step that can throw on values), so the caller's model and
// optimizer state still hold their values.
std::vector<Array> run_donating(const Executable& exe, std::vector<Array>& inputs,
                                Donations& donations, RunStats* stats) {
  try {
    return exe.run(inputs, stats, donations.held);
  } catch (...) {
    for (std::size_t i = 0; i < donations.arrays.size(); ++i) {
      if (donations.held[i] != nullptr) {
        restore_donated(donations.arrays[i], std::move(donations.held[i]));
      }
    }
    throw;
  }
}

}  // namespace

std::vector<const Array*>& hit_scratch() {
  thread_local std::vector<const Array*> scratch;
  return scratch;
}

// What one thread remembers of one JitState: the entry it ran last (the hint
// of its next call) and that call's stats. A few per thread, most recent first;
// keyed by the JitState's id, which is never reused, so a record of a destroyed
// JitState is never mistaken for a live one's.
struct JitState::ThreadRecord {
  std::uint64_t id = 0;
  std::uint64_t epoch = 0;
  std::weak_ptr<const JitEntry> entry;
  RunStats last_run;
};

namespace {
constexpr std::size_t kThreadRecords = 8;
std::atomic<std::uint64_t> g_next_jit_id{1};
}  // namespace

JitState::ThreadRecord& JitState::record() const {
  thread_local std::array<ThreadRecord, kThreadRecords> records;
  if (records[0].id == id_) return records[0];
  std::size_t i = 1;
  while (i < kThreadRecords && records[i].id != id_) ++i;
  if (i == kThreadRecords) {  // not there: replace the least recently used
    i = kThreadRecords - 1;
    records[i] = ThreadRecord{id_};
  }
  std::rotate(records.begin(), records.begin() + static_cast<std::ptrdiff_t>(i),
              records.begin() + static_cast<std::ptrdiff_t>(i) + 1);
  return records[0];
}

std::shared_ptr<const JitEntry> JitState::hint() const {
  const ThreadRecord& r = record();
  if (r.epoch != epoch_.load(std::memory_order_acquire)) return nullptr;
  return r.entry.lock();
}

void JitState::remember(const std::shared_ptr<const JitEntry>& entry, const RunStats& stats) const {
  ThreadRecord& r = record();
  r.entry = entry;
  r.epoch = entry == nullptr ? 0 : entry->epoch;
  r.last_run = stats;
}

RunStats JitState::last_run() const { return record().last_run; }

std::string JitState::last_retrace() const {
  std::lock_guard lock(info_mu_);
  return last_retrace_;
}

void JitState::run_hit(const JitEntry& entry, std::span<const Array* const> leaves,
                       std::span<const bool> donated, std::vector<Array>& outputs) const {
  touch(entry);
  const Executable& exe = *entry.executable;
  bool any_donated = false;
  for (bool d : donated) any_donated = any_donated || d;
  RunStats stats;
  if (!any_donated) {
    outputs = exe.run(leaves, &stats);
  } else {
    thread_local std::vector<Array> inputs;
    Donations donations;
    prepare_inputs(leaves, entry.first_leaf, donated, exe, inputs, 0, donations);
    outputs = run_donating(exe, inputs, donations, &stats);
  }
  record().last_run = stats;
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

namespace {
constexpr std::size_t kDefaultMaxEntries = 64;

JitOptions with_environment(JitOptions options) {
  if (const std::optional<std::string> v = env::choice("KILN_FUSION")) {
    if (*v == "0") options.fusion.enabled = false;
    if (*v == "elementwise") options.fusion.anchors = false;
    if (*v == "elementwise" || *v == "anchors") options.fusion.windows = false;
  }
  return options;
}

std::size_t entry_limit(const JitOptions& options) {
  if (options.max_entries != 0) return options.max_entries;
  return static_cast<std::size_t>(env::count("KILN_JIT_CACHE_LIMIT").value_or(kDefaultMaxEntries));
}

// Gives freed memory back to the system after a cache lets go of entries:
// the host buffer cache keeps blocks by exact size (every batch size adds
// some, up to 1 GiB) and glibc keeps freed pages (thousands of evicted shapes
// left RSS in GiB).
void give_memory_back() { trim_host_memory(); }
}  // namespace

JitState::JitState(JitOptions options)
    : options_(with_environment(std::move(options))),
      id_(g_next_jit_id.fetch_add(1, std::memory_order_relaxed)),
      log_retraces_(env_flag("KILN_LOG_RETRACES")),
      max_entries_(entry_limit(options_)) {}
JitState::~JitState() = default;

std::size_t JitState::cache_size() const {
  std::shared_lock lock(entries_mu_);
  return entry_count_;
}

std::vector<std::shared_ptr<const JitEntry>> JitState::all_entries() const {
  std::vector<std::shared_ptr<const JitEntry>> out;
  std::shared_lock lock(entries_mu_);
  out.reserve(entry_count_);
  for (const auto& [hash, bucket] : entries_) out.insert(out.end(), bucket.begin(), bucket.end());
  return out;
}

void JitState::clear_cache() {
  {
    decltype(entries_) dropped;  // freed outside the lock
    std::unique_lock lock(entries_mu_);
    dropped.swap(entries_);
    entry_count_ = 0;
    // Threads' hints from before this point no longer count. Entries running
    // now finish (their callers hold them) and are then freed.
    epoch_.fetch_add(1, std::memory_order_acq_rel);
  }
  give_memory_back();
}

std::shared_ptr<const JitEntry> JitState::evict_one() {
  std::size_t victim_hash = 0, victim_pos = 0;
  std::uint64_t oldest = UINT64_MAX;
  for (const auto& [hash, bucket] : entries_) {
    for (std::size_t i = 0; i < bucket.size(); ++i) {
      const std::uint64_t t = bucket[i]->last_used.load(std::memory_order_relaxed);
      if (t < oldest) {
        oldest = t;
        victim_hash = hash;
        victim_pos = i;
      }
    }
  }
  if (oldest == UINT64_MAX) return nullptr;
  auto it = entries_.find(victim_hash);
  std::shared_ptr<const JitEntry> victim = std::move(it->second[victim_pos]);
  it->second.erase(it->second.begin() + static_cast<std::ptrdiff_t>(victim_pos));
  if (it->second.empty()) entries_.erase(it);
  --entry_count_;
  evictions_.fetch_add(1, std::memory_order_relaxed);
  return victim;
}

void JitState::warn_evicting(const std::string& explanation) const {
  std::fprintf(stderr,
               "[filter_jit] warning: %s has compiled more than %zu programs (its cache limit), "
               "so it retraces too often; the least recently used are evicted from now on (this "
               "warning is shown once). A new static value, tree structure, dtype or shape is a "
               "new program: pad or bucket batch shapes, pass changing numbers as arrays, or raise "
               "JitOptions::max_entries / KILN_JIT_CACHE_LIMIT. The last retrace: %s\n",
               options_.name.c_str(), max_entries_, explanation.c_str());
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
    if (is_tracer(leaf)) throw_escaped_tracer(options_.name, leaf, path);
    if (leaf.device() != device) {
      throw DeviceError(str_cat("[", options_.name, "] arguments live on different devices: ",
                                tree::display_path(paths.front()), " on ", device.to_string(),
                                ", ", tree::display_path(path), " on ",
                                leaf.device().to_string(), "; move them with to_device()"));
    }
  }
  return device;
}

std::shared_ptr<const JitEntry> JitState::find(const JitCall& call, std::size_t hash,
                                                Device device) const {
  std::shared_lock lock(entries_mu_);
  const auto it = entries_.find(hash);
  if (it == entries_.end()) return nullptr;
  for (const auto& e : it->second) {
    if (matches(*e, call, hash, device)) {
      touch(*e);
      return e;
    }
  }
  return nullptr;
}

std::string JitState::explain_miss(const JitCall& call, Device device) const {
  const std::vector<std::shared_ptr<const JitEntry>> entries = all_entries();
  if (entries.empty()) return str_cat(options_.name, ": first call");
  // Nearest: fewest structural differences first (an entry with the same tree
  // structure is nearer than any with another), then fewest leaf differences.
  std::vector<std::string> best;
  std::vector<std::string> paths;  // of the call's leaves, made when first needed
  std::size_t best_score = static_cast<std::size_t>(-1);
  for (const auto& e : entries) {
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
          lines.push_back(str_cat(paths[k], ": ", what, " changed, ", to_string(was), " -> ",
                                  to_string(now)));
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
  return str_cat(options_.name, ": retrace ", trace_count() + 1, ", the nearest of ",
                 entries.size(), " cached ", entries.size() == 1 ? "key" : "keys",
                 " differs at\n    ", join(best, "\n    "));
}

std::shared_ptr<JitEntry> JitState::trace_and_compile(JitCall& call, const JitEntry& key,
                                                       TraceFn trace, const TraceGuards& guards) {
  const Device device = key.device;
  std::string explanation = explain_miss(call, device);
  // Each guard's slot is taken before tracing (two threads cannot both take
  // the last one) and given back if the trace fails.
  std::size_t reserved = 0;
  struct Release {
    const TraceGuards& guards;
    std::size_t& reserved;
    ~Release() {
      for (std::size_t i = 0; i < reserved; ++i) guards[i]->count.fetch_sub(1);
    }
  } release{guards, reserved};
  for (const auto& g : guards) {
    const std::size_t n = g->count.fetch_add(1) + 1;
    if (n > g->max) {
      g->count.fetch_sub(1);
      throw_too_many_traces(str_cat("[", options_.name, "]"), n, g->max, explanation);
    }
    ++reserved;
  }
  if (log_retraces_) std::fprintf(stderr, "[filter_jit] %s\n", explanation.c_str());
  {
    std::lock_guard lock(info_mu_);
    last_retrace_ = explanation;
  }
  auto entry = std::make_shared<JitEntry>();
  entry->defs = key.defs;
  entry->first_leaf = key.first_leaf;
  entry->device = device;
  entry->hash = key.hash;
  entry->avals = key.avals;
  Program program;
  {
    const std::string* saved = tl_explanation;
    tl_explanation = &explanation;
    struct Restore {
      const std::string* saved;
      ~Restore() { tl_explanation = saved; }
    } restore{saved};
    Trace t(options_.name);
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
  // Counted once it succeeded: a trace that threw stored nothing.
  reserved = 0;
  trace_count_.fetch_add(1, std::memory_order_relaxed);
  return entry;
}

// A key being traced by some thread: other threads missing on the same key
// wait for its entry instead of tracing it again.
struct JitState::Pending {
  std::shared_ptr<const JitEntry> key;  // defs, avals, device, hash; no executable
  std::thread::id owner;
  std::promise<std::shared_ptr<const JitEntry>> promise;  // null: the trace failed
  std::shared_future<std::shared_ptr<const JitEntry>> done = promise.get_future().share();
};

std::shared_ptr<const JitEntry> JitState::find_or_trace(JitCall& call, std::size_t hash,
                                                        Device device, TraceFn trace,
                                                        const TraceGuards& guards) {
  for (;;) {
    std::shared_ptr<Pending> mine;
    std::shared_future<std::shared_ptr<const JitEntry>> theirs;
    {
      std::unique_lock lock(entries_mu_);
      if (const auto it = entries_.find(hash); it != entries_.end()) {
        for (const auto& e : it->second) {
          if (matches(*e, call, hash, device)) return e;
        }
      }
      for (const auto& p : pending_) {
        if (!matches(*p->key, call, hash, device)) continue;
        if (p->owner == std::this_thread::get_id()) {
          throw ValueError(str_cat("[", options_.name,
                                   "] called inside its own trace with the arguments being "
                                   "traced; call the plain function there"));
        }
        theirs = p->done;
        break;
      }
      if (!theirs.valid()) {
        auto key = std::make_shared<JitEntry>();
        key->defs = call.defs;
        key->first_leaf = call.first_leaf;
        key->device = device;
        key->hash = hash;
        key->avals.reserve(call.leaves.size());
        for (const Array& a : call.leaves) key->avals.push_back(a.aval());
        mine = std::make_shared<Pending>();
        mine->key = std::move(key);
        mine->owner = std::this_thread::get_id();
        pending_.push_back(mine);
      }
    }
    if (theirs.valid()) {
      if (std::shared_ptr<const JitEntry> e = theirs.get()) return e;
      continue;  // their trace failed: try (and fail) on this thread's own
    }
    std::shared_ptr<JitEntry> entry;
    try {
      entry = trace_and_compile(call, *mine->key, trace, guards);
    } catch (...) {
      finish(mine, nullptr);
      throw;
    }
    finish(mine, entry);
    return entry;
  }
}

void JitState::finish(const std::shared_ptr<Pending>& pending,
                      const std::shared_ptr<JitEntry>& entry) {
  std::vector<std::shared_ptr<const JitEntry>> evicted;  // freed outside the lock
  {
    std::unique_lock lock(entries_mu_);
    std::erase(pending_, pending);
    if (entry != nullptr) {
      entry->epoch = epoch_.load(std::memory_order_relaxed);
      touch(*entry);
      while (entry_count_ >= max_entries_) {
        std::shared_ptr<const JitEntry> victim = evict_one();
        if (victim == nullptr) break;
        evicted.push_back(std::move(victim));
      }
      entries_[entry->hash].push_back(entry);
      ++entry_count_;
    }
  }
  pending->promise.set_value(entry);
  if (!evicted.empty()) {
    if (!warned_.exchange(true)) warn_evicting(last_retrace());
    evicted.clear();
    give_memory_back();
  }
}

std::pair<std::vector<Array>, std::shared_ptr<const JitEntry>> JitState::call(
    JitCall& call, TraceFn trace, const TraceGuards& guards) {
  if (current_trace() != nullptr) {
    // Called inside another trace (grad, another filter_jit, a control-flow
    // body): find or trace this function's program for the arguments' avals
    // (its own cache and trace count as usual) and inline it into the
    // enclosing trace by re-binding its equations. Nothing is donated.
    const Device device = call.leaves.empty() ? default_device() : call.leaves.front().device();
    const std::size_t hash = key_hash(call, device);
    std::shared_ptr<const JitEntry> entry = find(call, hash, device);
    if (entry == nullptr) entry = find_or_trace(call, hash, device, trace, guards);
    std::vector<Array> outputs = eval(entry->executable->program(), call.leaves);
    return {std::move(outputs), std::move(entry)};
  }
  const Device device = check_leaves(call);
  const std::size_t hash = key_hash(call, device);
  std::shared_ptr<const JitEntry> entry = find(call, hash, device);
  if (entry == nullptr) entry = find_or_trace(call, hash, device, trace, guards);
  std::vector<const Array*> leaves;
  leaves.reserve(call.leaves.size());
  for (const Array& a : call.leaves) leaves.push_back(&a);
  std::vector<Array> inputs;
  Donations donations;
  prepare_inputs(leaves, call.first_leaf, call.donated, *entry->executable, inputs, 1, donations);
  leaves.clear();
  call.leaves.clear();  // our handles must not keep donated buffers alive
  RunStats stats;
  std::vector<Array> outputs = run_donating(*entry->executable, inputs, donations, &stats);
  remember(entry, stats);
  return {std::move(outputs), std::move(entry)};
}

}  // namespace kiln::detail
