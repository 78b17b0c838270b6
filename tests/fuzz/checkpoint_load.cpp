// libFuzzer target: a whole checkpoint file (zip archive through minizip,
// manifest, .npy members; runtime/checkpoint_read.cpp) loaded into a fixed
// template. minizip reads from a path, so each input is written to a file in
// /dev/shm (or $TMPDIR) first. What loads must have the template's dtypes and
// shapes.
//
// Two input forms, so that mutations reach the manifest and the .npy headers
// (in a raw zip almost every edit of a member fails its CRC first):
//   - raw bytes: the file as it is (the zip layer, CRCs, truncation);
//   - "KILNZIP\n" then members, each "name\n" + contents, separated by
//     kSeparator: written as a stored zip with correct CRCs, then loaded.
#include <unistd.h>
#include <zip.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "checkpoint_template.hpp"
#include "fuzz.hpp"
#include "kiln/runtime/checkpoint_read.hpp"

namespace {

constexpr std::string_view kMembersMagic = "KILNZIP\n";
constexpr std::string_view kSeparator = "\n--kiln-member--\n";


// Writes the members form of `input` as a stored zip at `path`.
void write_members(std::string_view input, const std::filesystem::path &path) {
  zipFile z = zipOpen64(path.c_str(), APPEND_STATUS_CREATE);
  if (z == nullptr) return;
  while (!input.empty()) {
    const std::size_t end = input.find(kSeparator);
    const std::string_view member = input.substr(0, end);
    const std::size_t newline = member.find('\n');
    const std::string name(member.substr(0, newline));
    const std::string_view data =
        newline == std::string_view::npos ? std::string_view() : member.substr(newline + 1);
    zip_fileinfo info{};
    if (zipOpenNewFileInZip64(z, name.c_str(), &info, nullptr, 0, nullptr, 0, nullptr, 0, 0, 0) ==
        ZIP_OK) {
      zipWriteInFileInZip(z, data.data(), static_cast<unsigned>(data.size()));
      zipCloseFileInZip(z);
    }
    if (end == std::string_view::npos) break;
    input.remove_prefix(end + kSeparator.size());
  }
  zipClose(z, nullptr);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
  using namespace kiln;
  static const tree::Flat like = tree::flatten(fuzz::model_template());
  static const std::filesystem::path path = kiln::fuzz::scratch_file("checkpoint.npz");
  const std::string_view input(reinterpret_cast<const char *>(data), size);
  if (input.starts_with(kMembersMagic)) {
    std::filesystem::remove(path);
    write_members(input.substr(kMembersMagic.size()), path);
  } else {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(input.data(), static_cast<std::streamsize>(input.size()));
  }
  return fuzz::run([&] {
    for (bool check_statics : {true, false}) {
      const std::vector<Array> got =
          detail::ckpt::read_checkpoint(path, like.def, like.leaves, check_statics);
      fuzz::require(got.size() == like.leaves.size(), "one array per template leaf");
      for (std::size_t i = 0; i < got.size(); ++i) {
        fuzz::require(got[i].aval() == like.leaves[i].aval(), "the template's dtype and shape");
        fuzz::require(got[i].buffer()->nbytes() >= got[i].nbytes(), "a buffer that holds it");
      }
    }
  });
}
