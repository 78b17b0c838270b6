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
    {NodeKind::kDict, "dict"},     {NodeKind::kOptional, "nullopt"},
};

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

// A file records an engaged optional as its value (its path is the value's):
// the records are dropped and the sizes of the nodes above them shrink.
void drop_engaged_optionals(Manifest& m) {
  std::vector<std::uint32_t> dropped_before(m.nodes.size() + 1, 0);
  for (std::size_t i = 0; i < m.nodes.size(); ++i) {
    const ManifestNode& n = m.nodes[i];
    dropped_before[i + 1] =
        dropped_before[i] + (n.kind == NodeKind::kOptional && n.arity == 1 ? 1 : 0);
  }
  if (dropped_before.back() == 0) return;
  std::vector<ManifestNode> kept;
  kept.reserve(m.nodes.size() - dropped_before.back());
  for (std::size_t i = 0; i < m.nodes.size(); ++i) {
    ManifestNode& n = m.nodes[i];
    if (n.kind == NodeKind::kOptional && n.arity == 1) continue;
    n.size -= dropped_before[i + n.size] - dropped_before[i];
    kept.push_back(std::move(n));
  }
  m.nodes = std::move(kept);
}

}  // namespace

std::string_view kind_token(NodeKind k) {
  for (auto [kind, token] : kKindNames) {
    if (kind == k) return token;
  }
  return "?";
}

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
  drop_engaged_optionals(m);
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

}  // namespace kiln::detail::ckpt
