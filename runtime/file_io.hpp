// Writing a file so that a failed or interrupted write leaves any previous
// file at the path intact: "<path>.tmp.<pid>.<random>" is written, flushed to
// disk and renamed over the path (the checkpoint writers: save_checkpoint,
// write_safetensors). Internal: not installed.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

namespace kiln::detail {

// write(temp) fills the temporary file; errors are CheckpointError "<ctx>: ...".
// Temporary files of killed earlier writes of `path` are removed first.
void write_atomically(const std::filesystem::path& path, std::string_view ctx,
                      const std::function<void(const std::string& temp)>& write);

}  // namespace kiln::detail
