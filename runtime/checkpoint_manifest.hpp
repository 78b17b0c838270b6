// The manifest of a kiln checkpoint: one record per TreeDef node (path, kind,
// struct type, container length, None, array dtype/shape/member, static type
// and value), its text form stored in the .npz, and the comparison of a file's
// manifest against a template's that load_checkpoint reports. Internal: not
// installed.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/runtime/array.hpp"
#include "kiln/runtime/tree_def.hpp"

namespace kiln::detail::ckpt {

// The manifest member: its text as a 1-d uint8 .npy array, so that
// numpy.load reads every member of a checkpoint as an array
// (bytes(d["__kiln_manifest__"]).decode() is the text).
inline constexpr std::string_view kManifestMember = "__kiln_manifest__.npy";
// Where files written before that keep the text itself (numpy.load returns
// it as bytes). Still read when there is no kManifestMember.
inline constexpr std::string_view kLegacyManifestMember =
    "__kiln_manifest__.txt";
// The contents of kManifestMember for a manifest's text.
std::string manifest_member_data(std::string_view text);

struct ManifestNode {
  std::string path;
  NodeKind kind = NodeKind::kNone;
  std::uint32_t arity = 0;
  std::uint32_t size = 1;  // records in the subtree, itself included
  std::string type;        // struct: "Linear(weight, bias)"; static: C++ type
  std::string value;       // static: its printed value
  DType dtype = DType::kF32;  // array
  Shape shape;                // array
  std::string member;         // array: the .npy member's name
};

struct Manifest {
  std::string treedef;  // to_string(def), for people reading the file
  std::vector<ManifestNode> nodes;  // pre-order
};

// The zip member for an array at `path`: the path with bytes outside
// printable ASCII and / \ % escaped as %XX, plus ".npy" ("root.npy" for "").
std::string member_name(std::string_view path);
// A record kind's token in the manifest text ("array", "struct", ...).
std::string_view kind_token(NodeKind k);

// `leaves` are the tree's arrays (leaf order) and give dtypes and shapes.
Manifest make_manifest(const TreeDef& def, std::span<const Array> leaves);
std::string format_manifest(const Manifest& m);
// Throws CheckpointError "<context>: ..." for text that is not a well-formed
// manifest (so nothing after this needs to distrust the node records): every
// count, shape and name is checked, the records must form one tree, struct
// arities must match their types' fields, and each path must be the one the
// record's place in the tree gives it.
Manifest parse_manifest(std::string_view text, std::string_view context);

inline constexpr std::size_t kNoRecord = static_cast<std::size_t>(-1);
struct Comparison {
  // Every difference between the file's manifest and the template's, as
  // "path: what in file, what in template" lines, at the deepest node where it
  // shows (children of nodes that differ in kind, type or length are skipped).
  std::vector<std::string> differences;
  // For each array of the template (leaf order), the index of the file's
  // record it was compared with (kNoRecord where none was).
  std::vector<std::size_t> file_arrays;
};
Comparison compare(const Manifest& file, const Manifest& like,
                   bool check_statics);

}  // namespace kiln::detail::ckpt
