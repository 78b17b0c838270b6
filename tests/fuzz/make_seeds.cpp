// Writes the seed corpora under tests/fuzz/corpus/ (committed; rerun after a
// format change). Links the full libkiln (save_checkpoint), so it is built by
// hand against a normal build, not by meson:
//   c++ -std=c++20 -Ibuild/include tests/fuzz/make_seeds.cpp -o /tmp/make_seeds
//   \
//       build/libkiln.so $(pkg-config --cflags --libs minizip absl_hash
//       absl_strings) && /tmp/make_seeds
// (run from the repository root). The seeds that reproduce fixed bugs are
// written too, so every short CI run replays them. The legacy-text-manifest.*
// seeds of checkpoint_load are files of the older layout (a text manifest
// member), kept as that kiln wrote them.
#include <unzip.h>
#include <zip.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "checkpoint_template.hpp"
#include "kiln/backends/vulkan/disk_cache.hpp"
#include "kiln/runtime/checkpoint.hpp"
#include "kiln/runtime/checkpoint_manifest.hpp"
#include "kiln/runtime/npy.hpp"

namespace fs = std::filesystem;
using namespace kiln;

namespace {

const fs::path kCorpus = "tests/fuzz/corpus";

void write(const std::string &target, const std::string &name, const std::string &bytes) {
  fs::create_directories(kCorpus / target);
  std::ofstream(kCorpus / target / name, std::ios::binary) << bytes;
}

std::string bytes(std::initializer_list<int> values) {
  std::string out;
  for (int v : values) out += static_cast<char>(v);
  return out;
}

std::string read(const fs::path &p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

std::string replaced(std::string s, const std::string &from, const std::string &to) {
  const std::size_t at = s.find(from);
  if (at == std::string::npos) throw std::runtime_error("seed edit not found: " + from);
  return s.replace(at, from.size(), to);
}

// A stored zip with these members (what tests/checkpoint/helpers.hpp's
// write_zip does): whole files whose manifest was edited.
std::string zipped(const std::vector<std::pair<std::string, std::string>> &members) {
  const fs::path tmp = fs::temp_directory_path() / "kiln-make-seeds.zip";
  zipFile z = zipOpen64(tmp.c_str(), APPEND_STATUS_CREATE);
  for (const auto &[name, data] : members) {
    zip_fileinfo info{};
    zipOpenNewFileInZip64(z, name.c_str(), &info, nullptr, 0, nullptr, 0, nullptr, 0, 0, 0);
    zipWriteInFileInZip(z, data.data(), static_cast<unsigned>(data.size()));
    zipCloseFileInZip(z);
  }
  zipClose(z, nullptr);
  std::string out = read(tmp);
  fs::remove(tmp);
  return out;
}

// checkpoint_load's members form (see checkpoint_load.cpp).
std::string members_form(const std::vector<std::pair<std::string, std::string>> &members) {
  std::string out = "KILNZIP\n";
  for (std::size_t i = 0; i < members.size(); ++i) {
    if (i > 0) out += "\n--kiln-member--\n";
    out += members[i].first + "\n" + members[i].second;
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> unzipped(const fs::path &p) {
  std::vector<std::pair<std::string, std::string>> out;
  unzFile z = unzOpen64(p.c_str());
  for (int rc = unzGoToFirstFile(z); rc == UNZ_OK; rc = unzGoToNextFile(z)) {
    char name[1024];
    unz_file_info64 info{};
    unzGetCurrentFileInfo64(z, &info, name, sizeof(name), nullptr, 0, nullptr, 0);
    std::string data(info.uncompressed_size, '\0');
    unzOpenCurrentFile(z);
    unzReadCurrentFile(z, data.data(), static_cast<unsigned>(data.size()));
    unzCloseCurrentFile(z);
    out.emplace_back(name, data);
  }
  unzClose(z);
  return out;
}

}  // namespace

int main() {
  fuzz::Model model = fuzz::model_template();
  const fs::path tmp = fs::temp_directory_path() / "kiln-make-seeds.npz";
  save_checkpoint(tmp, model);
  write("checkpoint_load", "stored.npz", read(tmp));
  const auto members = unzipped(tmp);
  save_checkpoint(tmp, model, SaveOptions{.compress = true});
  write("checkpoint_load", "deflated.npz", read(tmp));
  fuzz::Model lone;
  lone.layers.resize(1);
  lone.layers[0].weight = fuzz::blank(DType::kF32, {1});
  save_checkpoint(tmp, lone);
  write("checkpoint_load", "other-structure.npz", read(tmp));
  fs::remove(tmp);

  const tree::Flat flat = tree::flatten(model);
  const std::string manifest =
      detail::ckpt::format_manifest(detail::ckpt::make_manifest(flat.def, flat.leaves));
  write("checkpoint_manifest", "model.txt", manifest);
  // The two bugs of issue 19 and a third of the same kind (std::out_of_range
  // from substr). fuzzer-crash-* in corpus/checkpoint_load/ are kept as the
  // fuzzer found them against the code before the fixes.
  write("checkpoint_manifest", "crash-struct-fewer-children.txt",
        replaced(manifest,
                 "struct\t2\tlayers[1]\tLinear(weight, "
                 "bias)\narray\t0\tlayers[1].weight\tf32\t3,1\t"
                 "layers[1].weight.npy\narray\t0\tlayers[1]."
                 "bias\tf32\t1\tlayers[1].bias.npy\n",
                 "struct\t1\tlayers[1]\tLinear(weight, "
                 "bias)\narray\t0\tlayers[1].weight\tf32\t3,1\t"
                 "layers[1].weight.npy\n"));
  write("checkpoint_manifest", "crash-path-not-member.txt",
        replaced(manifest, "array\t0\tlayers[0].weight\t", "array\t0\tlayers[0].wieght\t"));
  write("checkpoint_manifest", "crash-struct-type-no-fields.txt",
        replaced(manifest, "\tLinear(weight, bias)\n", "\tLinear\n"));

  // The same bugs in whole files (the manifest member replaced).
  for (const char *crash : {"crash-struct-fewer-children.txt", "crash-path-not-member.txt",
                            "crash-struct-type-no-fields.txt"}) {
    auto edited = members;
    for (auto &[member, data] : edited) {
      if (member == detail::ckpt::kManifestMember) {
        data = detail::ckpt::manifest_member_data(read(kCorpus / "checkpoint_manifest" / crash));
      }
    }
    write("checkpoint_load", std::string(crash).replace(std::string(crash).find(".txt"), 4, ".npz"),
          zipped(edited));
    write("checkpoint_load",
          std::string(crash).replace(std::string(crash).find(".txt"), 4, ".members"),
          members_form(edited));
  }
  write("checkpoint_load", "stored.members", members_form(members));

  for (DType d : {DType::kBool, DType::kI32, DType::kU32, DType::kF16, DType::kF32, DType::kF64}) {
    write("npy_header", std::string(name(d)) + "-2x3.npy", detail::npy::make_header(d, {2, 3}));
  }
  write("npy_header", "scalar.npy", detail::npy::make_header(DType::kF32, {}));
  write("npy_header", "vector.npy", detail::npy::make_header(DType::kF32, {7}));
  write("npy_header", "manifest.npy", detail::npy::make_bytes_header(895));
  {
    // numpy's 2.0 header (4-byte length), as it writes for long dicts.
    std::string dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (4, 0, 5), }";
    dict.append(64 - (12 + dict.size() + 1) % 64, ' ');
    dict += '\n';
    std::string h = std::string("\x93NUMPY\x02\x00", 8);
    for (int i = 0; i < 4; ++i) h += static_cast<char>((dict.size() >> (8 * i)) & 0xff);
    write("npy_header", "v2.npy", h + dict);
  }

  vk::CacheProvenance p;
  p.vendor_id = 0x10005;
  const std::string text = "; SPIR-V\n; Version: 1.3\nOpCapability Shader\n";
  const std::vector<std::uint32_t> words = {0x07230203, 0x00010300, 0x00080001, 12,
                                            0,          0x00020011, 1};
  auto entry = [&](char mode, std::string_view kind, std::uint64_t key,
                   const std::vector<std::uint8_t> &payload) {
    const auto bytes = vk::encode_entry(p, kind, key, payload);
    return std::string(1, mode) + std::string(bytes.begin(), bytes.end());
  };
  write("disk_cache_entry", "spirv-fixed.bin",
        entry(0, "spirv", 1, vk::encode_spirv_payload(text, words)));
  write("disk_cache_entry", "spirv-own-header.bin",
        entry(1, "spirv", 0xabcdef, vk::encode_spirv_payload(text, words)));
  write("disk_cache_entry", "spirv-rechecksummed.bin",
        entry(3, "spirv", 7, vk::encode_spirv_payload(text, words)));
  write("disk_cache_entry", "pipeline.bin", entry(1, "pipeline", 0, {1, 2, 3, 4, 5, 6, 7, 8}));

  write("text_parsers", "cpu", "cpu");
  write("text_parsers", "vulkan", "vulkan");
  write("text_parsers", "vulkan-3", "vulkan:3");
  // checkpoint_roundtrip: a flags byte, then records (key length, key, dtype
  // index, rank, dims); see checkpoint_roundtrip.cpp.
  write("checkpoint_roundtrip", "two-arrays",
        bytes({0, 1, 'w', 3, 2, 2, 3, 1, 'b', 3, 1, 4}));
  write("checkpoint_roundtrip", "deflated-f16", bytes({1, 4, 'h', 'a', 'l', 'f', 5, 1, 4}));
  write("checkpoint_roundtrip", "odd-keys", bytes({0, 3, 'a', '/', 'b', 0, 0, 2, '.', 0, 6, 0}));
  write("checkpoint_roundtrip", "many-members", bytes({2, 5}));  // 65,535 scalars + "x"
  write("text_parsers", "einsum-matmul", "ij,jk->ik");
  write("text_parsers", "einsum-implicit", "ba,ca");
  write("text_parsers", "einsum-three", "bij, bjk ,kl->bil");
  write("text_parsers", "einsum-trace", "ii->");
  std::cout << "seeds written under " << kCorpus.string() << "\n";
}
