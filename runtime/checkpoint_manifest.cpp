// Checkpoint manifests: see checkpoint_manifest.hpp. The text is one record per
// line, fields separated by tabs (\\, \t, \n, \r escaped inside fields):
//   kiln-checkpoint  1
//   treedef  MLP(layers=[Linear(weight=*, bias=None)], activation=relu)
//   struct   2  <path>  MLP(layers, activation)
//   list     1  layers
//   array    0  layers[0].weight  f32  3,4  layers[0].weight.npy
//   none     0  layers[0].bias
//   static   0  activation  <C++ type>  relu
#include "kiln/runtime/checkpoint_manifest.hpp"

#include <algorithm>
#include <charconv>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "kiln/runtime/checkpoint.hpp"
#include "kiln/runtime/npy.hpp"
#include "kiln/runtime/strings.hpp"
#include "kiln/runtime/tree_internal.hpp"

namespace kiln::detail::ckpt {
namespace {

constexpr std::string_view kFormat = "kiln-checkpoint";
constexpr std::string_view kVersion = "1";

constexpr std::pair<NodeKind, std::string_view> kKindNames[] = {
    {NodeKind::kArray, "array"},   {NodeKind::kNone, "none"},
    {NodeKind::kStatic, "static"}, {NodeKind::kStruct, "struct"},
    {NodeKind::kList, "list"},     {NodeKind::kTuple, "tuple"},
    {NodeKind::kDict, "dict"},     {NodeKind::kEmpty, "nullopt"},
};

std::string_view kind_token(NodeKind k) {
  for (auto [kind, token] : kKindNames) {
    if (kind == k) return token;
  }
  return "?";
}

std::string escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string dims_text(const Shape& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(s[i]);
  }
  return out;
}

// The field names of a struct record's type "Name(a, b)", or nullopt when
// the type does not have that form.
std::optional<std::vector<std::string_view>> struct_fields(std::string_view type) {
  const std::size_t open = type.find('(');
  if (open == std::string_view::npos || open == 0 || type.back() != ')') {
    return std::nullopt;
  }
  std::vector<std::string_view> out;
  std::string_view inner = type.substr(open + 1, type.size() - open - 2);
  while (!inner.empty()) {
    const std::size_t sep = inner.find(", ");
    out.push_back(inner.substr(0, sep));
    if (out.back().empty()) return std::nullopt;
    if (sep == std::string_view::npos) break;
    inner.remove_prefix(sep + 2);
    if (inner.empty()) return std::nullopt;
  }
  return out;
}

// "(a, b)" of a struct type (validated by the parser for files; the
// template's are made by make_manifest).
std::string_view fields_text(std::string_view type) {
  const std::size_t open = type.find('(');
  return open == std::string_view::npos ? type : type.substr(open);
}

class Parser {
 public:
  Parser(std::string_view text, std::string_view context)
      : text_(text), context_(context) {}

  Manifest parse() {
    Manifest m;
    std::vector<std::string> f = line();
    if (f.size() != 2 || f[0] != kFormat) bad("not a kiln checkpoint manifest");
    if (f[1] != kVersion) {
      fail(str_cat("manifest version ", f[1],
                   " is not supported (this kiln "
                   "reads version ",
                   kVersion, ")"));
    }
    f = line();
    if (f.size() != 2 || f[0] != "treedef") bad("expected the treedef line");
    m.treedef = f[1];
    while (pos_ < text_.size()) m.nodes.push_back(node(line()));
    if (m.nodes.empty()) bad("no nodes");
    compute_sizes(m.nodes);
    return m;
  }

 private:
  [[noreturn]] void fail(std::string_view what) {
    throw CheckpointError(str_cat(context_, ": ", what));
  }
  [[noreturn]] void bad(std::string_view what) {
    fail(str_cat("corrupt manifest (line ", line_no_, "): ", what));
  }

  std::vector<std::string> line() {
    ++line_no_;
    if (pos_ >= text_.size()) bad("unexpected end");
    std::size_t end = text_.find('\n', pos_);
    if (end == std::string_view::npos) bad("unterminated line");
    std::string_view l = text_.substr(pos_, end - pos_);
    pos_ = end + 1;
    std::vector<std::string> fields(1);
    for (std::size_t i = 0; i < l.size(); ++i) {
      const char c = l[i];
      if (c == '\t') {
        fields.emplace_back();
      } else if (c == '\\') {
        if (++i == l.size()) bad("dangling escape");
        switch (l[i]) {
          case '\\':
            fields.back() += '\\';
            break;
          case 't':
            fields.back() += '\t';
            break;
          case 'n':
            fields.back() += '\n';
            break;
          case 'r':
            fields.back() += '\r';
            break;
          default:
            bad("bad escape");
        }
      } else {
        fields.back() += c;
      }
    }
    return fields;
  }

  std::uint64_t number(std::string_view s, std::string_view what) {
    std::uint64_t v = 0;
    auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || ptr != s.data() + s.size() ||
        v > (std::uint64_t{1} << 62)) {
      bad(str_cat("bad ", what, " '", s, "'"));
    }
    return v;
  }

  ManifestNode node(const std::vector<std::string>& f) {
    if (f.size() < 3) bad("too few fields");
    ManifestNode n;
    auto kind = std::find_if(std::begin(kKindNames), std::end(kKindNames),
                             [&](const auto& p) { return p.second == f[0]; });
    if (kind == std::end(kKindNames)) bad(str_cat("unknown kind '", f[0], "'"));
    n.kind = kind->first;
    n.arity = static_cast<std::uint32_t>(
        std::min<std::uint64_t>(number(f[1], "arity"), 0xffffffffu));
    n.path = f[2];
    const bool container =
        n.kind == NodeKind::kStruct || n.kind == NodeKind::kList ||
        n.kind == NodeKind::kTuple || n.kind == NodeKind::kDict;
    if (!container && n.arity != 0) bad("a leaf with children");
    std::size_t want = 3;
    switch (n.kind) {
      case NodeKind::kStruct:
        want = 4;
        if (f.size() == want) {
          n.type = f[3];
          const auto fields = struct_fields(n.type);
          if (!fields) {
            bad(str_cat("struct type '", n.type, "' is not Name(field, ...)"));
          }
          if (fields->size() != n.arity) {
            bad(str_cat("struct ", n.type, " has ", n.arity,
                        " children, its type names ", fields->size(),
                        " fields"));
          }
        }
        break;
      case NodeKind::kStatic:
        want = 5;
        if (f.size() == want) n.type = f[3], n.value = f[4];
        break;
      case NodeKind::kArray:
        want = 6;
        if (f.size() == want) array(f, n);
        break;
      default:
        break;
    }
    if (f.size() != want)
      bad(str_cat(f[0], " record with ", f.size(), " fields (expected ", want,
                  ")"));
    return n;
  }

  void array(const std::vector<std::string>& f, ManifestNode& n) {
    bool known = false;
    for (DType t : {DType::kBool, DType::kI32, DType::kU32, DType::kF16,
                    DType::kF32, DType::kF64, DType::kBF16}) {
      if (f[3] == name(t)) n.dtype = t, known = true;
    }
    if (!known) bad(str_cat("unknown dtype '", f[3], "'"));
    std::string_view dims = f[4];
    while (!dims.empty()) {
      const std::size_t comma = dims.find(',');
      n.shape.push_back(static_cast<std::int64_t>(
          number(dims.substr(0, comma), "dimension")));
      if (n.shape.size() > 64) bad("more than 64 dimensions");
      if (comma == std::string_view::npos) break;
      dims.remove_prefix(comma + 1);
      if (dims.empty()) bad("trailing comma in shape");
    }
    const ShapeSize size = shape_size(n.shape, size_of(n.dtype));
    if (!size.ok()) bad(size.error);
    n.member = f[5];
    if (n.member.empty()) bad("empty member name");
  }

  // Subtree sizes from the arities, checking that the records form one tree
  // and that each record's path is the one its place in the tree gives it
  // (load_checkpoint pairs records by position, and messages name paths).
  struct Open {
    std::size_t node;
    std::uint32_t next = 0;                     // the next child's index
    std::vector<std::string_view> fields;       // struct: its type's fields
    std::unordered_set<std::string_view> keys;  // dict: children's paths
  };

  // Record i is on line i + 3 (after the format and treedef lines).
  [[noreturn]] void bad_at(std::size_t i, std::string_view what) {
    line_no_ = i + 3;
    bad(what);
  }

  void compute_sizes(std::vector<ManifestNode>& nodes) {
    std::vector<Open> open;
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      if (i == 0) {
        if (!nodes[0].path.empty()) {
          bad_at(0, str_cat("root path '", nodes[0].path, "' is not empty"));
        }
      } else {
        if (open.empty()) bad_at(i, "records after the end of the tree");
        check_path(open.back(), nodes, i);
      }
      if (nodes[i].arity > 0) {
        open.push_back(Open{i});
        // The parser checked that the type names `arity` fields.
        if (nodes[i].kind == NodeKind::kStruct) open.back().fields = *struct_fields(nodes[i].type);
        continue;
      }
      nodes[i].size = 1;
      while (!open.empty() && open.back().next == nodes[open.back().node].arity) {
        const std::size_t idx = open.back().node;
        nodes[idx].size = static_cast<std::uint32_t>(i - idx + 1);
        open.pop_back();
      }
    }
    if (!open.empty()) bad("the tree ends early");
  }

  // Checks child `i` of the open node `parent` and counts it.
  void check_path(Open& parent, const std::vector<ManifestNode>& nodes,
                  std::size_t i) {
    const ManifestNode& p = nodes[parent.node];
    const std::string& path = nodes[i].path;
    const std::uint32_t k = parent.next++;
    std::string want;
    switch (p.kind) {
      case NodeKind::kStruct:
        want = str_cat(p.path, p.path.empty() ? "" : ".", parent.fields[k]);
        break;
      case NodeKind::kDict: {
        const std::string prefix = p.path + "[\"";
        if (path.size() < prefix.size() + 2 || !path.starts_with(prefix) ||
            !path.ends_with("\"]")) {
          bad_at(i, str_cat("path '", path, "' is not an entry of dict '",
                            p.path, "'"));
        }
        if (!parent.keys.insert(path).second) {
          bad_at(i, str_cat("dict '", p.path, "' has two entries at '", path,
                            "'"));
        }
        return;
      }
      default:
        want = str_cat(p.path, "[", k, "]");
    }
    if (path != want) {
      bad_at(i, str_cat("path '", path, "', the tree puts this record at '",
                        want, "'"));
    }
  }

  std::string_view text_;
  std::string_view context_;
  std::size_t pos_ = 0;
  std::size_t line_no_ = 0;
};

std::string describe(const ManifestNode& n) {
  switch (n.kind) {
    case NodeKind::kStruct:
      return n.type.substr(0, n.type.find('('));
    case NodeKind::kStatic:
      return "static " + n.type;
    case NodeKind::kEmpty:
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

// Members of arrays under a struct with a member_paths hook (the outermost
// one where they nest) are named by the paths it gives.
void apply_member_paths(const TreeDefData& d, Manifest& m) {
  for (std::size_t i = 0; i < d.nodes.size();) {
    const DefNode& n = d.nodes[i];
    if (n.kind != NodeKind::kStruct || n.info->member_paths == nullptr) {
      ++i;
      continue;
    }
    const std::string& prefix = m.nodes[i].path;
    std::vector<StaticValue> statics;
    std::vector<std::size_t> arrays;
    std::vector<std::string> paths;
    for (std::size_t j = i + 1; j < i + n.size; ++j) {
      if (d.nodes[j].kind == NodeKind::kStatic) {
        statics.push_back(d.statics[d.nodes[j].aux]);
      } else if (d.nodes[j].kind == NodeKind::kArray) {
        arrays.push_back(j);
        // Below the struct: "<prefix>.field..." (or "field..." at the root).
        std::string_view rel(m.nodes[j].path);
        rel.remove_prefix(prefix.size());
        if (!prefix.empty() && rel.starts_with('.')) rel.remove_prefix(1);
        paths.emplace_back(rel);
      }
    }
    n.info->member_paths(statics, paths);
    for (std::size_t k = 0; k < arrays.size(); ++k) {
      m.nodes[arrays[k]].member =
          member_name(tree::join_path(prefix, paths[k]));
    }
    i += n.size;
  }
}

}  // namespace

std::string member_name(std::string_view path) {
  if (path.empty()) return "root.npy";
  std::string out;
  for (char ch : path) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c >= 0x7f || c == '/' || c == '\\' || c == '%') {
      constexpr char kHex[] = "0123456789ABCDEF";
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += ch;
    }
  }
  return out + ".npy";
}

Manifest make_manifest(const TreeDef& def, std::span<const Array> leaves) {
  Manifest m;
  m.treedef = to_string(def);
  m.nodes.reserve(def.num_nodes());
  const TreeDefData& d = def.data();
  std::size_t leaf = 0;
  std::string path;
  auto fn = [&](std::size_t, const DefNode& n, const std::string& p) {
    ManifestNode out;
    out.path = p;
    out.kind = n.kind;
    out.arity = n.arity;
    out.size = n.size;
    if (n.kind == NodeKind::kStruct) {
      out.type = str_cat(n.info->name, "(", join(n.info->fields, ", "), ")");
    } else if (n.kind == NodeKind::kStatic) {
      out.type = d.statics[n.aux].type_name();
      out.value = d.statics[n.aux].repr();
    } else if (n.kind == NodeKind::kArray) {
      const Array& a = leaves[leaf++];
      out.dtype = a.dtype();
      out.shape = a.shape();
      out.member = member_name(p);
    }
    m.nodes.push_back(std::move(out));
  };
  walk(d, 0, path, fn);
  apply_member_paths(d, m);
  return m;
}

std::string format_manifest(const Manifest& m) {
  std::string out = str_cat(kFormat, "\t", kVersion, "\n");
  out += str_cat("treedef\t", escape(m.treedef), "\n");
  for (const ManifestNode& n : m.nodes) {
    out += str_cat(kind_token(n.kind), "\t", n.arity, "\t", escape(n.path));
    if (n.kind == NodeKind::kStruct) {
      out += str_cat("\t", escape(n.type));
    } else if (n.kind == NodeKind::kStatic) {
      out += str_cat("\t", escape(n.type), "\t", escape(n.value));
    } else if (n.kind == NodeKind::kArray) {
      out += str_cat("\t", name(n.dtype), "\t", dims_text(n.shape), "\t",
                     escape(n.member));
    }
    out += '\n';
  }
  return out;
}

std::string manifest_member_data(std::string_view text) {
  return str_cat(npy::make_bytes_header(text.size()), text);
}

Manifest parse_manifest(std::string_view text, std::string_view context) {
  return Parser(text, context).parse();
}

Comparison compare(const Manifest& file, const Manifest& like,
                   bool check_statics) {
  Comparer c(file, like, check_statics);
  c.run(0, 0);
  return c.take();
}

}  // namespace kiln::detail::ckpt
