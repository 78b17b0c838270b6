// Structure diffs: every difference between two TreeDefs at the deepest node
// where it shows, with a description precise enough to build the optimizer's
// state-mismatch errors and the jit's retrace explanations on.
#include <algorithm>
#include <string_view>
#include <unordered_map>

#include "kiln/runtime/strings.hpp"
#include "kiln/runtime/tree.hpp"
#include "kiln/runtime/tree_internal.hpp"

namespace kiln::tree {

using detail::append_child;
using detail::DefNode;
using detail::describe;
using detail::is_slot;
using detail::quoted_keys;
using detail::TreeDefData;

std::string_view name(DiffKind k) {
  switch (k) {
    case DiffKind::kNodeKind:
      return "node_kind";
    case DiffKind::kTypeName:
      return "type";
    case DiffKind::kLength:
      return "length";
    case DiffKind::kKeys:
      return "keys";
    case DiffKind::kNoneVsArray:
      return "none_vs_array";
    case DiffKind::kStaticValue:
      return "static_value";
    case DiffKind::kStaticType:
      return "static_type";
    case DiffKind::kCallableIdentity:
      return "callable_identity";
  }
  return "?";
}

namespace {

class Differ {
 public:
  Differ(const TreeDefData& a, const TreeDefData& b) : a_(a), b_(b) {}

  void run(std::size_t ia, std::size_t ib) {
    const DefNode& x = a_.nodes[ia];
    const DefNode& y = b_.nodes[ib];
    if (x.kind != y.kind) {
      if (is_slot(x.kind) && is_slot(y.kind)) {
        add(DiffKind::kNoneVsArray,
            detail::str_cat("expected ", name(x.kind), ", got ", name(y.kind)));
      } else {
        add(DiffKind::kNodeKind, detail::str_cat("expected ", describe(a_, ia),
                                                 ", got ", describe(b_, ib)));
      }
      return;
    }
    if (!detail::same_type(x.info, y.info)) {
      // Containers of one kind and length whose element types differ: the
      // difference is named where it shows (layers[0]: Linear -> Conv); where
      // nothing below differs (std::pair vs std::tuple, empty vectors), here.
      const std::size_t before = out_.size();
      if (x.kind != NodeKind::kStruct && x.arity == y.arity) {
        if (x.kind == NodeKind::kDict) dict(ia, ib);
        else children(ia, ib);
      }
      if (out_.size() == before) {
        add(DiffKind::kTypeName, detail::str_cat(type_name(x), " -> ", type_name(y)));
      }
      return;
    }
    switch (x.kind) {
      case NodeKind::kStruct:
        return children(ia, ib);
      case NodeKind::kOptional:
        if (x.arity == y.arity) return children(ia, ib);
        add(DiffKind::kNodeKind, detail::str_cat("expected ", describe(a_, ia),
                                                 ", got ", describe(b_, ib)));
        return;
      case NodeKind::kList:
      case NodeKind::kTuple:
        if (x.arity == y.arity) return children(ia, ib);
        add(DiffKind::kLength,
            detail::str_cat("length ", x.arity, " vs ", y.arity));
        return;
      case NodeKind::kDict:
        return dict(ia, ib);
      case NodeKind::kStatic:
        return statics(a_.statics[x.aux], b_.statics[y.aux]);
      default:
        return;
    }
  }

  std::vector<Difference> take() { return std::move(out_); }

 private:
  static std::string_view type_name(const DefNode& n) {
    return n.info == nullptr ? std::string_view("kiln::Tree") : n.info->type_name;
  }

  void add(DiffKind kind, std::string description) {
    out_.push_back(Difference{path_, kind, std::move(description)});
  }

  void children(std::size_t ia, std::size_t ib) {
    const DefNode& x = a_.nodes[ia];
    std::size_t ca = ia + 1;
    std::size_t cb = ib + 1;
    for (std::size_t i = 0; i < x.arity; ++i) {
      const std::size_t len = path_.size();
      append_child(path_, a_, x, i);
      run(ca, cb);
      path_.resize(len);
      ca += a_.nodes[ca].size;
      cb += b_.nodes[cb].size;
    }
  }

  void dict(std::size_t ia, std::size_t ib) {
    const DefNode& x = a_.nodes[ia];
    const DefNode& y = b_.nodes[ib];
    const auto ka = a_.keys.begin() + x.aux;
    const auto kb = b_.keys.begin() + y.aux;
    if (!std::equal(ka, ka + x.arity, kb, kb + y.arity)) {
      std::vector<std::string> missing, extra;
      for (std::size_t i = 0; i < x.arity; ++i) {
        if (std::find(kb, kb + y.arity, ka[i]) == kb + y.arity) {
          missing.push_back("\"" + ka[i] + "\"");
        }
      }
      for (std::size_t i = 0; i < y.arity; ++i) {
        if (std::find(ka, ka + x.arity, kb[i]) == ka + x.arity) {
          extra.push_back("\"" + kb[i] + "\"");
        }
      }
      std::string desc =
          detail::str_cat("keys ", quoted_keys(a_.keys, x.aux, x.arity), " vs ",
                          quoted_keys(b_.keys, y.aux, y.arity));
      if (!missing.empty()) desc += ": missing " + detail::join(missing, ", ");
      if (!extra.empty()) {
        desc += (missing.empty() ? ": extra " : ", extra ") +
                detail::join(extra, ", ");
      }
      add(DiffKind::kKeys, std::move(desc));
    }
    // The entries under common keys still align, so compare them too.
    std::unordered_map<std::string_view, std::size_t> b_child;
    for (std::size_t i = 0, c = ib + 1; i < y.arity;
         ++i, c += b_.nodes[c].size) {
      b_child.emplace(kb[i], c);
    }
    for (std::size_t i = 0, c = ia + 1; i < x.arity;
         ++i, c += a_.nodes[c].size) {
      auto it = b_child.find(ka[i]);
      if (it == b_child.end()) continue;
      const std::size_t len = path_.size();
      append_child(path_, a_, x, i);
      run(c, it->second);
      path_.resize(len);
    }
  }

  void statics(const StaticValue& va, const StaticValue& vb) {
    if (va == vb) return;
    if (va.is_callable() && vb.is_callable()) {
      add(DiffKind::kCallableIdentity,
          detail::str_cat("callable identity changed: ", va.repr(), " -> ",
                          vb.repr()));
    } else if (va.type() != vb.type()) {
      add(DiffKind::kStaticType,
          detail::str_cat("static type changed: ", va.type_name(), " -> ",
                          vb.type_name(), " (", va.repr(), " -> ", vb.repr(),
                          ")"));
    } else {
      add(DiffKind::kStaticValue,
          detail::str_cat("static value changed: ", va.repr(), " -> ",
                          vb.repr()));
    }
  }

  const TreeDefData& a_;
  const TreeDefData& b_;
  std::string path_;
  std::vector<Difference> out_;
};

}  // namespace

std::vector<Difference> diff(const TreeDef& a, const TreeDef& b) {
  if (a == b) return {};
  Differ d(a.data(), b.data());
  d.run(0, 0);
  return d.take();
}

std::string format_diff(std::span<const Difference> diffs,
                        std::string_view indent) {
  std::string out;
  for (const Difference& d : diffs) {
    if (!out.empty()) out += "\n";
    out += detail::str_cat(indent, display_path(d.path), ": ", d.description);
  }
  return out;
}

}  // namespace kiln::tree
