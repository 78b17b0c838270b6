// Reading a checkpoint file into host arrays: the zip archive (minizip), the
// manifest and its comparison with the template, each .npy member. Everything
// read from the file is untrusted and checked before use; every failure is a
// CheckpointError (a file that does not fit the template, a TreeError).
// Separate from checkpoint.cpp so that it needs nothing from dsl/ (the fuzz
// targets in tests/fuzz link it without the backends). Internal: not
// installed.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <span>
#include <vector>

#include "kiln/runtime/array.hpp"
#include "kiln/runtime/tree_def.hpp"

namespace kiln::detail::ckpt {

// The file's arrays, on the host, in the template's leaf order.
std::vector<Array> read_checkpoint(const std::filesystem::path& path,
                                   const TreeDef& def,
                                   std::span<const Array> like_leaves,
                                   bool check_statics);

// The .npy members of any .npz archive (numpy.savez), named without ".npy",
// in name order: those `select` takes (all when empty); a member of a dtype
// kiln lacks is skipped with `skip_unsupported`, else a CheckpointError.
std::vector<std::pair<std::string, Array>> read_npz(
    const std::filesystem::path& path, const std::function<bool(const std::string&)>& select,
    bool skip_unsupported);

}  // namespace kiln::detail::ckpt
