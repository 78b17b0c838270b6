// dist::Group: joining a group (rendezvous, Gloo's full TCP mesh), the
// communication thread's failure handling, the agreement check and barrier.
#include <gloo/allgather.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "kiln/dist/group_impl.hpp"
#include "kiln/dist/sigpipe.hpp"
#include "kiln/dist/store.hpp"
#include "kiln/dist/tcp_store.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::dist {

using kiln::detail::join;
using kiln::detail::str_cat;
namespace detail {
namespace {

std::string seconds(std::chrono::milliseconds ms) {
  return absl::StrFormat("%.1f s", static_cast<double>(ms.count()) / 1000.0);
}

void validate(const Options& o) {
  const std::string who = "[dist.init] ";
  if (o.world_size < 1) {
    throw ValueError(str_cat(who, "world_size is ", o.world_size, "; it must be at least 1"));
  }
  if (o.rank < 0 || o.rank >= o.world_size) {
    throw ValueError(str_cat(who, "rank ", o.rank, " is outside [0, ", o.world_size,
                             ") for world_size ", o.world_size));
  }
  if (o.timeout.count() <= 0) {
    throw ValueError(str_cat(who, "timeout must be positive, got ", o.timeout.count(), " ms"));
  }
  if (o.bucket_bytes < 8) {
    throw ValueError(str_cat(who, "bucket_bytes must be at least 8, got ", o.bucket_bytes));
  }
  if (o.world_size == 1) return;
  if (o.store_path.empty() == o.store_address.empty()) {
    throw ValueError(str_cat(who, "rank ", o.rank, " of ", o.world_size,
                             ": a world of more than one process needs exactly one rendezvous: ",
                             "store_path (KILN_DIST_STORE, a directory every rank can reach) or ",
                             "store_address (KILN_DIST_ADDR, host:port served by rank 0)"));
  }
  if (o.run_id.empty()) {
    throw ValueError(str_cat(who, "run_id must not be empty"));
  }
}

std::string describe(const Header& h) {
  const auto op = static_cast<Op>(h.op);
  std::string s(op_name(op));
  if (op == Op::kBroadcast) s += str_cat(" from rank ", h.root);
  if (op == Op::kAllReduceMean || op == Op::kBroadcast) {
    s += absl::StrFormat(" of %d leaves (%d bytes, signature %016x)", h.leaves, h.bytes,
                         h.signature);
  }
  return s;
}

bool operator==(const Header& a, const Header& b) {
  return a.op == b.op && a.leaves == b.leaves && a.signature == b.signature && a.bytes == b.bytes &&
         a.root == b.root;
}

// FNV-1a, 64 bits.
struct Fnv {
  std::uint64_t h = 1469598103934665603ull;
  void add(std::uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  }
};

}  // namespace

std::string_view op_name(Op op) {
  switch (op) {
    case Op::kInit:
      return "init";
    case Op::kBarrier:
      return "barrier";
    case Op::kAllReduceMean:
      return "all_reduce_mean";
    case Op::kBroadcast:
      return "broadcast";
  }
  return "unknown collective";
}

std::uint64_t signature(const TreeDef& def, std::span<const Array> leaves) {
  Fnv f;
  for (const kiln::detail::DefNode& n : def.nodes()) {
    f.add(static_cast<std::uint64_t>(n.kind));
    f.add(n.arity);
  }
  for (const Array& a : leaves) {
    f.add(static_cast<std::uint64_t>(a.dtype()));
    f.add(a.shape().size());
    for (auto d : a.shape()) f.add(static_cast<std::uint64_t>(d));
  }
  return f.h;
}

GroupImpl::GroupImpl(const Options& opts) : options(opts) {
  validate(options);
  if (options.world_size > 1) connect();
}

GroupImpl::~GroupImpl() {
  comm_.reset();     // joins the communication thread
  context_.reset();  // closes the connections
}

std::string GroupImpl::who(std::string_view op) const {
  return str_cat("[dist.", op, "] rank ", options.rank, " of ", options.world_size, ": ");
}

void GroupImpl::check_usable(std::string_view op) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!failure_.empty()) {
    throw DistError(str_cat(
        who(op), "the group failed in an earlier collective and cannot be used: ", failure_));
  }
}

std::byte* GroupImpl::bucket_memory(std::size_t k, std::size_t bytes) {
  if (buckets_.size() <= k) buckets_.resize(k + 1);
  auto& [memory, size] = buckets_[k];
  if (size < bytes) {
    memory.reset();
    memory.reset(new std::byte[bytes]);
    size = bytes;
  }
  return memory.get();
}

void GroupImpl::mark_failed(std::string message) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (failure_.empty()) failure_ = std::move(message);
}

void GroupImpl::fail(std::string_view op, const std::exception& e) {
  const std::string text = e.what();
  const std::string lower = absl::AsciiStrToLower(text);
  const bool timed_out =
      lower.find("timed out") != std::string::npos || lower.find("timeout") != std::string::npos;
  std::string msg = who(op);
  if (timed_out) {
    msg += str_cat("no answer from a peer within ", seconds(options.timeout),
                   " (the group's timeout, KILN_DIST_TIMEOUT): a rank is stuck, "
                   "far slower than the others, or gone");
  } else {
    msg += "lost the connection to a peer: its process died or left the group";
  }
  msg += str_cat(" [gloo: ", text, "]; the group cannot be used any more");
  mark_failed(msg);
  if (timed_out) throw DistTimeoutError(msg);
  throw DistError(msg);
}

std::future<void> GroupImpl::submit(std::string_view op, std::function<void(std::uint32_t)> body) {
  const std::uint32_t tag = next_tag_++;
  return comm_->submit([this, op = std::string(op), body = std::move(body), tag] {
    check_usable(op);
    try {
      body(tag);
    } catch (const gloo::Exception& e) {
      fail(op, e);
    }
  });
}

void GroupImpl::wait_all(std::vector<std::future<void>>& jobs) {
  std::exception_ptr first;
  for (auto& j : jobs) {
    try {
      j.get();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

void GroupImpl::agree(Op op, const Header& mine) {
  const std::string_view name = op_name(op);
  const auto n = static_cast<std::size_t>(options.world_size);
  std::vector<Header> all(n);
  Header sent = mine;
  constexpr std::size_t kWords = sizeof(Header) / sizeof(std::uint64_t);
  static_assert(sizeof(Header) == kWords * sizeof(std::uint64_t));
  submit(name, [&](std::uint32_t tag) {
    gloo::AllgatherOptions o(context_);
    o.setInput(reinterpret_cast<std::uint64_t*>(&sent), kWords);
    o.setOutput(reinterpret_cast<std::uint64_t*>(all.data()), kWords * n);
    o.setTag(tag);
    o.setTimeout(options.timeout);
    gloo::allgather(o);
  }).get();
  if (std::all_of(all.begin(), all.end(), [&](const Header& h) { return h == all[0]; })) {
    return;
  }
  std::vector<std::string> said;
  for (std::size_t r = 0; r < n; ++r) said.push_back(str_cat("rank ", r, ": ", describe(all[r])));
  throw DistError(
      str_cat(who(name), "the ranks disagree on this collective (", join(said, "; "),
              "): every rank must call the same collectives in the same order, on trees "
              "of the same structure, dtypes and shapes"));
}

void GroupImpl::connect() {
  const std::string who_init = who("init");
  // Store and transport errors come without the "[dist.init] rank r of w: "
  // prefix; timeouts stay timeouts.
  auto rethrow = [&](const std::exception& e) {
    const std::string text = e.what();
    if (text.rfind("[dist.", 0) == 0) throw;
    const std::string lower = absl::AsciiStrToLower(text);
    const std::string msg = who_init + text;
    if (dynamic_cast<const DistTimeoutError*>(&e) != nullptr ||
        lower.find("timeout") != std::string::npos ||
        lower.find("timed out") != std::string::npos) {
      throw DistTimeoutError(msg);
    }
    throw DistError(msg);
  };
  // Gloo's event-loop thread (made with the device) keeps this thread's mask.
  SigpipeBlock no_sigpipe;
  try {
    std::unique_ptr<Store> store =
        options.store_address.empty()
            ? make_file_store(options.store_path, options.run_id, options.timeout)
            : make_tcp_store(options.store_address, options.rank == 0, options.run_id,
                             options.timeout);
    const std::string joined = str_cat("joined/", options.rank);
    if (store->has(joined)) {
      throw DistError(
          str_cat(who_init, "the rendezvous store (", store->where(),
                  ") already holds this rank's key from another job: use a fresh store ",
                  "or another run id (KILN_DIST_RUN_ID)"));
    }
    std::shared_ptr<gloo::transport::Device> device;
    try {
      gloo::transport::tcp::attr attr;
      attr.hostname = options.host;
      device = gloo::transport::tcp::CreateDevice(attr);
    } catch (const std::exception& e) {
      throw DistError(str_cat(who_init, "cannot listen on host '", options.host,
                              "' (KILN_DIST_HOST): ", e.what()));
    }

    const std::string pid = std::to_string(::getpid());
    store->set(joined, std::vector<char>(pid.begin(), pid.end()));
    std::vector<std::string> keys;
    for (int r = 0; r < options.world_size; ++r) keys.push_back(str_cat("joined/", r));
    try {
      store->wait(keys, options.timeout);
    } catch (const DistTimeoutError&) {
      std::vector<int> missing;
      for (int r = 0; r < options.world_size; ++r) {
        if (!store->has(keys[static_cast<std::size_t>(r)])) missing.push_back(r);
      }
      throw DistTimeoutError(
          str_cat(who_init, missing.size() == 1 ? "rank " : "ranks ", join(missing, ", "),
                  " did not join within ", seconds(options.timeout),
                  " (the group's timeout, KILN_DIST_TIMEOUT; rendezvous: ", store->where(), ")"));
    }

    auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.world_size);
    context->setTimeout(options.timeout);
    context->connectFullMesh(*store, device);
    context_ = std::move(context);
    comm_ = std::make_unique<CommThread>();
    // Every rank is connected once this returns; the store is not needed after.
    agree(Op::kInit, Header{static_cast<std::uint64_t>(Op::kInit)});
  } catch (const std::exception& e) {
    rethrow(e);
  }
}

}  // namespace detail

Group::Group() : impl_(std::make_shared<detail::GroupImpl>(Options{})) {}
Group::Group(const Options& options) : impl_(std::make_shared<detail::GroupImpl>(options)) {}

int Group::rank() const { return impl_->options.rank; }
int Group::world_size() const { return impl_->options.world_size; }
const Options& Group::options() const { return impl_->options; }
const Stats& Group::last_stats() const { return impl_->stats; }

void Group::barrier() const {
  if (world_size() == 1) return;
  impl_->check_usable("barrier");
  impl_->agree(detail::Op::kBarrier,
               detail::Header{static_cast<std::uint64_t>(detail::Op::kBarrier)});
}

Group init() { return Group(options_from_env()); }
Group init(const Options& options) { return Group(options); }

}  // namespace kiln::dist
