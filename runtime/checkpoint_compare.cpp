// Comparing a checkpoint's manifest with the one a template makes
// (checkpoint_manifest.hpp: compare): every difference as one line naming the
// tree path (optimizer buffers by their parameter's path), and the file record
// each template array was matched with.
#include <algorithm>
#include <charconv>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "kiln/runtime/checkpoint_manifest.hpp"
#include "kiln/runtime/strings.hpp"
#include "kiln/runtime/tree_internal.hpp"

namespace kiln::detail::ckpt {
namespace {

// "(a, b)" of a struct type (validated by the parser for files; the
// template's are made by make_manifest).
std::string_view fields_text(std::string_view type) {
  const std::size_t open = type.find('(');
  return open == std::string_view::npos ? type : type.substr(open);
}

std::string describe(const ManifestNode& n) {
  switch (n.kind) {
    case NodeKind::kStruct:
      return n.type.substr(0, n.type.find('('));
    case NodeKind::kStatic:
      return "static " + n.type;
    case NodeKind::kOptional:
      return "empty optional";
    case NodeKind::kNone:
      return "None";
    default:
      return std::string(kind_token(n.kind));
  }
}

// A member name as the path it escapes, without ".npy".
std::string member_path(std::string_view member) {
  member.remove_suffix(4);
  std::string out;
  for (std::size_t i = 0; i < member.size(); ++i) {
    unsigned v = 0;
    if (member[i] == '%' && i + 2 < member.size() &&
        std::from_chars(&member[i + 1], &member[i + 3], v, 16).ec == std::errc()) {
      out += static_cast<char>(v);
      i += 2;
    } else {
      out += member[i];
    }
  }
  return out;
}

// An array named in the file by a struct's member_paths (an optimizer buffer by
// its parameter's path), not by its tree path.
bool renamed(const ManifestNode& n) {
  return n.kind == NodeKind::kArray && n.member != member_name(n.path);
}

// How a difference names a node: a renamed array by the name that says which
// parameter it belongs to, its slot in the tree after it
// ("opt_state.stages[0].mu.layers[0].weight (opt_state.stages[0].leaves["mu"][0])").
std::string node_name(const ManifestNode& n) {
  if (!renamed(n)) return tree::display_path(n.path);
  return str_cat(member_path(n.member), " (", tree::display_path(n.path), ")");
}

class Comparer {
 public:
  Comparer(const Manifest& file, const Manifest& like, bool check_statics)
      : f_(file.nodes),
        t_(like.nodes),
        check_statics_(check_statics),
        file_arrays_(like.nodes.size(), kNoRecord) {}

  void run(std::size_t fi, std::size_t ti) {
    const ManifestNode& f = f_[fi];
    const ManifestNode& t = t_[ti];
    if (f.kind != t.kind) {
      return add(t.path, describe(f), describe(t));
    }
    switch (t.kind) {
      case NodeKind::kStruct:
        if (f.type == t.type) return children(fi, ti);
        if (describe(f) != describe(t)) {
          return add(t.path, describe(f), describe(t));
        }
        return add(t.path, str_cat("fields ", fields_text(f.type)),
                   std::string(fields_text(t.type)));
      case NodeKind::kList:
      case NodeKind::kTuple:
        if (f.arity == t.arity) return children(fi, ti);
        add(t.path, str_cat("length ", f.arity), std::to_string(t.arity));
        return renamed_children(fi, ti);
      case NodeKind::kDict:
        return dict(fi, ti);
      case NodeKind::kArray:
        file_arrays_[ti] = fi;
        if (f.dtype != t.dtype) {
          add(t, str_cat("dtype ", name(f.dtype)), std::string(name(t.dtype)));
        }
        if (f.shape != t.shape) {
          add(t, "shape " + to_string(f.shape), to_string(t.shape));
        }
        return;
      case NodeKind::kStatic:
        if (f.type != t.type) {
          return add(t.path,
                     str_cat("static type ", f.type, " (", f.value, ")"),
                     str_cat(t.type, " (", t.value, ")"));
        }
        if (check_statics_ && f.value != t.value) {
          add(t.path, "static value " + f.value, t.value);
        }
        return;
      default:
        return;
    }
  }

  Comparison take() {
    Comparison c;
    c.differences = std::move(out_);
    for (std::size_t ti = 0; ti < t_.size(); ++ti) {
      if (t_[ti].kind == NodeKind::kArray) c.file_arrays.push_back(file_arrays_[ti]);
    }
    return c;
  }

 private:
  void add(const std::string& path, const std::string& in_file,
           const std::string& in_template) {
    add_named(tree::display_path(path), in_file, in_template);
  }
  void add(const ManifestNode& n, const std::string& in_file, const std::string& in_template) {
    add_named(node_name(n), in_file, in_template);
  }
  void add_named(const std::string& name, const std::string& in_file,
                 const std::string& in_template) {
    out_.push_back(str_cat(name, ": ", in_file, " in file, ", in_template, " in template"));
  }

  // Lists of different lengths whose arrays are named by parameter (an
  // optimizer state saved for another model): pairs them by that name, so the
  // error says which parameters are missing, extra, or of another shape.
  void renamed_children(std::size_t fi, std::size_t ti) {
    std::unordered_map<std::string, std::size_t> in_file;
    for (std::size_t c : child_indices(f_, fi)) {
      if (renamed(f_[c])) in_file.emplace(f_[c].member, c);
    }
    auto aval = [](const ManifestNode& n) {
      return str_cat(name(n.dtype), " ", to_string(n.shape));
    };
    for (std::size_t c : child_indices(t_, ti)) {
      if (!renamed(t_[c])) continue;
      auto it = in_file.find(t_[c].member);
      if (it == in_file.end()) {
        add_named(member_path(t_[c].member), "not", aval(t_[c]));
        continue;
      }
      if (f_[it->second].dtype != t_[c].dtype || f_[it->second].shape != t_[c].shape) {
        add_named(member_path(t_[c].member), aval(f_[it->second]), aval(t_[c]));
      }
      in_file.erase(it);
    }
    for (std::size_t c : child_indices(f_, fi)) {
      if (renamed(f_[c]) && in_file.contains(f_[c].member)) {
        add_named(member_path(f_[c].member), aval(f_[c]), "not");
      }
    }
  }

  std::vector<std::size_t> child_indices(const std::vector<ManifestNode>& v,
                                         std::size_t idx) {
    std::vector<std::size_t> out;
    std::size_t c = idx + 1;
    for (std::uint32_t i = 0; i < v[idx].arity; ++i) {
      out.push_back(c);
      c += v[c].size;
    }
    return out;
  }

  void children(std::size_t fi, std::size_t ti) {
    const auto fc = child_indices(f_, fi);
    const auto tc = child_indices(t_, ti);
    // Callers compared the arities; this keeps the pairing in bounds anyway.
    if (fc.size() != tc.size()) {
      return add(t_[ti].path, str_cat(fc.size(), " children"),
                 std::to_string(tc.size()));
    }
    for (std::size_t i = 0; i < tc.size(); ++i) run(fc[i], tc[i]);
  }

  // Entries are matched by path (which holds the key); extra and missing keys
  // are reported one per path.
  void dict(std::size_t fi, std::size_t ti) {
    std::unordered_map<std::string_view, std::size_t> in_file;
    for (std::size_t c : child_indices(f_, fi)) in_file.emplace(f_[c].path, c);
    std::unordered_map<std::string_view, bool> in_template;
    for (std::size_t c : child_indices(t_, ti)) {
      in_template.emplace(t_[c].path, true);
      auto it = in_file.find(t_[c].path);
      if (it == in_file.end()) {
        out_.push_back(str_cat(tree::display_path(t_[c].path),
                               ": not in file, ", describe(t_[c]),
                               " in template"));
      } else {
        run(it->second, c);
      }
    }
    for (std::size_t c : child_indices(f_, fi)) {
      if (!in_template.contains(f_[c].path)) {
        out_.push_back(str_cat(tree::display_path(f_[c].path), ": ",
                               describe(f_[c]), " in file, not in template"));
      }
    }
  }

  const std::vector<ManifestNode>& f_;
  const std::vector<ManifestNode>& t_;
  bool check_statics_;
  std::vector<std::string> out_;
  std::vector<std::size_t> file_arrays_;  // by template node
};

}  // namespace

Comparison compare(const Manifest& file, const Manifest& like,
                   bool check_statics) {
  Comparer c(file, like, check_statics);
  c.run(0, 0);
  return c.take();
}

}  // namespace kiln::detail::ckpt
