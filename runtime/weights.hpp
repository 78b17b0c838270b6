// Weights from other frameworks: safetensors files (what Hugging Face, PyTorch,
// MLX, Burn and candle exchange weights in) and plain numpy .npz archives
// (numpy.savez, no kiln manifest), read as named arrays and loaded into a kiln
// tree by its leaves' paths; and a tree written as safetensors for them.
//
//   NamedArrays w = read_safetensors("model.safetensors");
//   MLP model = load_weights(w, template_model, {.name = [](const std::string& path) {
//     return rename(path);  // "layers[0].weight" -> "fc1.weight"
//   }});
//   write_safetensors("out.safetensors", named_arrays(model));
//
// Files are untrusted input: a damaged or foreign file throws CheckpointError
// naming the file and what is wrong (never a crash or an unbounded
// allocation); a file that does not fit the template throws TreeError listing
// every path that differs.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "kiln/runtime/array.hpp"
#include "kiln/runtime/checkpoint.hpp"
#include "kiln/runtime/tree.hpp"

namespace kiln {

// One named array of a weight file (on the host).
struct NamedArray {
  std::string name;
  Array array;
};
using NamedArrays = std::vector<NamedArray>;

struct ReadWeightsOptions {
  // Only the tensors whose name this accepts are read (a large file's part);
  // empty: all.
  std::function<bool(const std::string& name)> select;
  // Tensors of a dtype kiln has no counterpart for (safetensors' I64, I8, U8,
  // F8_*, ...) are left out instead of refused.
  bool skip_unsupported_dtypes = false;
};

// The tensors of a safetensors file in the order of their data, with their
// dtypes (F64, F32, F16, BF16, I32, U32, BOOL) and shapes.
NamedArrays read_safetensors(const std::filesystem::path& path,
                             const ReadWeightsOptions& options = {});
// Writes `arrays` as a safetensors file (atomically, as save_checkpoint);
// `metadata` is the header's "__metadata__" (string to string).
void write_safetensors(const std::filesystem::path& path, const NamedArrays& arrays,
                       const std::map<std::string, std::string>& metadata = {});

// The .npy members of a numpy .npz archive (stored or deflated), named
// without ".npy", in name order (kiln's manifest member, if any, left out).
NamedArrays read_npz(const std::filesystem::path& path, const ReadWeightsOptions& options = {});

struct LoadWeightsOptions {
  // The file's name for a leaf's tree path ("layers[1].bias"); empty: the path.
  std::function<std::string(const std::string& path)> name;
  // A file array no leaf takes is an error unless this is true.
  bool allow_unused = false;
  // A file array of another float dtype than its leaf's is converted (f32
  // weights into a bf16 model); otherwise a dtype difference is an error.
  bool convert_floats = false;
};

// Each array leaf of `like` from the file array of its name: dtype and shape
// must match the leaf's (see convert_floats), the device is the leaf's; None
// leaves and statics come from `like`. Every difference is reported at once:
//   [load_weights] layers[1].bias: shape (3,) in file, (4,) in template
template <class T>
T load_weights(const NamedArrays& file, const T& like, const LoadWeightsOptions& options = {});

// Each array leaf of `tree` named by its path, in leaf order.
template <class T>
NamedArrays named_arrays(const T& tree);

namespace detail {
std::vector<Array> load_weights_flat(const NamedArrays& file, const TreeDef& def,
                                     std::span<const Array> like_leaves,
                                     const LoadWeightsOptions& options);
NamedArrays named_arrays_flat(const TreeDef& def, std::span<const Array> leaves);
}  // namespace detail

template <class T>
T load_weights(const NamedArrays& file, const T& like, const LoadWeightsOptions& options) {
  tree::Flat flat = tree::flatten(like);
  std::vector<Array> leaves = detail::load_weights_flat(file, flat.def, flat.leaves, options);
  return tree::unflatten<T>(flat.def, leaves);
}

template <class T>
NamedArrays named_arrays(const T& tree) {
  tree::Flat flat = tree::flatten(tree);
  return detail::named_arrays_flat(flat.def, flat.leaves);
}

}  // namespace kiln
