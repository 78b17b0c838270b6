// Checkpoints: any pytree saved to a .npz file that numpy.load reads, and
// loaded back into a template tree with the structure, dtypes and shapes
// checked.
//
//   save_checkpoint("model.npz", model);          // atomic: temp file + rename
//   MLP restored = load_checkpoint("model.npz", model_template);
//
// The file is a zip archive whose members are all .npy arrays, so
//   d = numpy.load("model.npz"); {k: d[k].shape for k in d.files}
// works, and d["layers[1].bias"] is that array:
//   - one member per array leaf, named by the leaf's tree path
//     ("layers[1].bias.npy"; "root.npy" for a tree that is one array; bytes
//     outside printable ASCII and '/', '\', '%' are %XX-escaped). None
//     leaves and statics have no member.
//   - "__kiln_manifest__.npy", the manifest text as a 1-d uint8 array
//     (bytes(d["__kiln_manifest__"]).decode()): one tab-separated record per
//     TreeDef node with its tree path, kind, struct type and fields, container
//     length, array dtype, shape and member, and each static leaf's type and
//     value (as printed).
//   - an optim::State's per-parameter buffers are named by the parameter's
//     path: "opt_state.stages[0].mu.layers[1].weight" for the tree path
//     opt_state.stages[0].leaves["mu"][2]; its scalars keep their tree paths
//     ("opt_state.stages[0].scalars[\"count\"]"). Any registered struct can
//     name its members so (NodeInfo::member_paths in tree_def.hpp).
// Files written before the manifest was an array (a text member
// "__kiln_manifest__.txt", slot-indexed optimizer members) still load.
#pragma once

#include <filesystem>
#include <span>
#include <vector>

#include "kiln/runtime/array.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/tree.hpp"

namespace kiln {

// A checkpoint file that cannot be written, read or parsed: missing, not a zip
// archive, truncated, failing its CRC, without a kiln manifest, or with a .npy
// member whose header or size is wrong. (A well-formed checkpoint that does not
// fit the template is a TreeError instead.)
class CheckpointError : public Error {
 public:
  using Error::Error;
};

struct SaveOptions {
  // Deflate the members (numpy.savez_compressed); the default stores them as
  // numpy.savez does, which is faster and barely larger for float weights.
  bool compress = false;
};

struct LoadOptions {
  // Static leaves must print the same in the file and in the template. With
  // false only their types must match, and the template's values are kept.
  bool check_statics = true;
};

// Writes `tree` to `path` (conventionally *.npz). The file is first written
// to "<path>.tmp.<pid>.<random>", flushed to disk, then renamed over `path`,
// so a failed or interrupted save leaves any previous file at `path` intact.
// Array values are read through their buffers (any device); tracers cannot be
// saved. Throws CheckpointError on IO errors (naming the file and the reason)
// and when two arrays would be stored as one member (naming both paths).
template <class T>
void save_checkpoint(const std::filesystem::path& path, const T& tree,
                     const SaveOptions& options = {});

// Reads the checkpoint at `path` into a tree of the template's type and
// structure. `like` supplies the structure, the statics and, per array leaf,
// the expected dtype and shape and the device the loaded array goes to (its
// values are not read). Differences between the file and the template are
// reported together, one line per path, as a TreeError:
//   [load_checkpoint] layers[1].bias: shape (3,) in file, (4,) in template
// A damaged or foreign file throws CheckpointError.
template <class T>
T load_checkpoint(const std::filesystem::path& path, const T& like,
                  const LoadOptions& options = {});

namespace detail {
void save_checkpoint_flat(const std::filesystem::path& path, const TreeDef& def,
                          std::span<const Array> leaves,
                          const SaveOptions& options);
// The file's arrays in the template's leaf order.
std::vector<Array> load_checkpoint_flat(const std::filesystem::path& path,
                                        const TreeDef& def,
                                        std::span<const Array> like_leaves,
                                        const LoadOptions& options);
}  // namespace detail

template <class T>
void save_checkpoint(const std::filesystem::path& path, const T& tree,
                     const SaveOptions& options) {
  tree::Flat flat = tree::flatten(tree);
  detail::save_checkpoint_flat(path, flat.def, flat.leaves, options);
}

template <class T>
T load_checkpoint(const std::filesystem::path& path, const T& like,
                  const LoadOptions& options) {
  tree::Flat flat = tree::flatten(like);
  std::vector<Array> leaves =
      detail::load_checkpoint_flat(path, flat.def, flat.leaves, options);
  return tree::unflatten<T>(flat.def, leaves);
}

}  // namespace kiln
