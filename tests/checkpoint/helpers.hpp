// Shared by the checkpoint test files: scratch directories, zip tampering
// through minizip, bitwise array comparison, and the model that
// tests/checkpoint/read_npz.py expects numpy to read.
#pragma once

#include <doctest/doctest.h>
#include <unistd.h>
#include <unzip.h>
#include <zip.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <kiln/kiln.hpp>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace ckpt_test {

using namespace kiln;
namespace fs = std::filesystem;

// A fresh directory per test, removed afterwards. In memory where possible:
// the corruption tests rewrite a file thousands of times, and on an ext4 with
// online discard each truncating rewrite takes milliseconds.
inline fs::path scratch_root() {
  std::error_code ec;
  if (fs::is_directory("/dev/shm", ec) && ::access("/dev/shm", W_OK) == 0) {
    return "/dev/shm";
  }
  return fs::temp_directory_path();
}
struct TempDir {
  fs::path path;
  TempDir() {
    static int counter = 0;
    path = scratch_root() / ("kiln_ckpt_test_" + std::to_string(::getpid()) +
                             "_" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  fs::path operator/(const std::string& name) const { return path / name; }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(path))
      out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
};

inline std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
inline void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Zip members by name, in archive order (to tamper with a checkpoint).
using Members = std::vector<std::pair<std::string, std::string>>;
inline Members read_zip(const fs::path& p) {
  Members out;
  unzFile z = unzOpen64(p.c_str());
  REQUIRE(z != nullptr);
  for (int rc = unzGoToFirstFile(z); rc == UNZ_OK; rc = unzGoToNextFile(z)) {
    char name[1024];
    unz_file_info64 info{};
    REQUIRE(unzGetCurrentFileInfo64(z, &info, name, sizeof(name), nullptr, 0,
                                    nullptr, 0) == UNZ_OK);
    std::string data(info.uncompressed_size, '\0');
    REQUIRE(unzOpenCurrentFile(z) == UNZ_OK);
    REQUIRE(unzReadCurrentFile(z, data.data(),
                               static_cast<unsigned>(data.size())) ==
            static_cast<int>(data.size()));
    REQUIRE(unzCloseCurrentFile(z) == UNZ_OK);
    out.emplace_back(name, data);
  }
  unzClose(z);
  return out;
}
inline void write_zip(const fs::path& p, const Members& members) {
  zipFile z = zipOpen64(p.c_str(), APPEND_STATUS_CREATE);
  REQUIRE(z != nullptr);
  for (const auto& [name, data] : members) {
    zip_fileinfo info{};
    REQUIRE(zipOpenNewFileInZip64(z, name.c_str(), &info, nullptr, 0, nullptr,
                                  0, nullptr, 0, 0, 0) == ZIP_OK);
    REQUIRE(zipWriteInFileInZip(z, data.data(),
                                static_cast<unsigned>(data.size())) == ZIP_OK);
    REQUIRE(zipCloseFileInZip(z) == ZIP_OK);
  }
  REQUIRE(zipClose(z, nullptr) == ZIP_OK);
}
inline std::string& member(Members& m, const std::string& name) {
  for (auto& [n, data] : m) {
    if (n == name) return data;
  }
  FAIL("no member " << name);
  static std::string none;
  return none;
}
// A .npy member with the given header dict and data bytes (version 1.0).
inline std::string npy(const std::string& dict, const std::string& data) {
  std::string out = "\x93NUMPY\x01";
  out += '\0';
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>(dict.size() >> 8);
  return out + dict + data;
}

// The manifest member: its text as a 1-d |u1 .npy array.
inline const std::string kManifest = "__kiln_manifest__.npy";
// The text of a manifest member, checking its .npy header on the way.
inline std::string manifest_text(const std::string& data) {
  REQUIRE(data.starts_with(std::string("\x93NUMPY\x01\x00", 8)));
  const std::size_t header = 10 + (static_cast<unsigned char>(data[8]) |
                                   static_cast<unsigned char>(data[9]) << 8);
  REQUIRE(header <= data.size());
  const std::string text = data.substr(header);
  CHECK(data.substr(10, header - 10)
            .starts_with("{'descr': '|u1', 'fortran_order': False, 'shape': (" +
                         std::to_string(text.size()) + ",), }"));
  CHECK(header % 64 == 0);  // padded as numpy pads
  return text;
}
// A manifest member holding `text` (its header unpadded).
inline std::string manifest_member(const std::string& text) {
  return npy("{'descr': '|u1', 'fortran_order': False, 'shape': (" +
                 std::to_string(text.size()) + ",), }\n",
             text);
}

inline std::string bytes_of(const Array& a) {
  std::string out(a.buffer()->nbytes(), '\0');
  a.buffer()->read(out.data());
  return out.substr(0, a.nbytes());
}
// Same dtype, shape and bytes (NaN-safe, -0.0-exact).
inline bool identical(const Array& a, const Array& b) {
  if (a.is_null() || b.is_null()) return a.is_null() && b.is_null();
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         bytes_of(a) == bytes_of(b);
}
template <class T>
inline void check_identical_leaves(const T& got, const T& want) {
  const auto g = tree::leaves(got);
  const auto w = tree::leaves(want);
  REQUIRE(g.size() == w.size());
  const auto paths = tree::paths(want);
  for (std::size_t i = 0; i < g.size(); ++i) {
    INFO(paths[i]);
    CHECK(identical(g[i], w[i]));
  }
}

inline Array floats(std::vector<float> v, Shape s) {
  return array<float>(v, s);
}
inline Array words_as(DType dtype, const std::vector<std::uint16_t>& bits) {
  auto buf = HostBuffer::allocate(bits.size() * 2);
  std::memcpy(buf->host_data(), bits.data(), bits.size() * 2);
  return Array(dtype, Shape{static_cast<std::int64_t>(bits.size())},
               std::move(buf));
}
inline Array f16_from_bits(std::vector<std::uint16_t> bits) {
  return words_as(DType::kF16, bits);
}
inline Array bf16_from_bits(std::vector<std::uint16_t> bits) {
  return words_as(DType::kBF16, bits);
}

inline Array identity(const Array& x) { return x; }

struct Linear {
  Array weight;
  Array bias;
  KILN_MODULE(Linear, weight, bias);
};

// The tree the numpy reader (tests/checkpoint/read_npz.py) expects.
struct Model {
  std::vector<Linear> layers;
  std::map<std::string, Array> buffers;
  Array half;
  Array precise;
  std::optional<Linear> head;
  int depth = 2;
  std::string name = "mlp";
  Array (*activation)(const Array&) = identity;
  KILN_MODULE(Model, layers, buffers, half, precise, head, depth, name,
              activation);
};

// A model and its Adam state, as a training loop checkpoints them (and as
// tests/checkpoint/v1_train_state.npz, written by kiln before issue 18, holds
// them).
struct Mlp {
  std::vector<Linear> layers;
  KILN_MODULE(Mlp, layers);
};
struct TrainState {
  Mlp model;
  optim::State opt_state;
  KILN_MODULE(TrainState, model, opt_state);
};

inline Model make_model();
// make_model's layers after one Adam step whose gradient is the parameters:
// mu = 0.1 * w, nu = 0.001 * w * w, count 1.
inline TrainState make_train_state() {
  TrainState t;
  t.model.layers = make_model().layers;
  const auto opt = optim::adam(1e-3);
  const optim::State fresh = opt.init(optim::gradient_template(t.model));
  t.opt_state = opt.update(t.model, fresh, t.model).second;
  return t;
}

inline Model make_model() {
  Model m;
  m.layers = {{floats({0, 0.25f, 0.5f, 0.75f, 1, 1.25f}, {2, 3}), Array()},
              {floats({1.5f, -2, 0.25f}, {3, 1}), floats({0.5f}, {1})}};
  m.buffers["count"] = scalar<std::int32_t>(7);
  m.buffers["key"] = array<std::uint32_t>({0u, 0xffffffffu});
  m.buffers["mask"] = array<bool>({true, false, true}, {3});
  m.half = f16_from_bits({0x3C00, 0xC000, 0x3555, 0x7C00});
  m.precise = array<double>({1.0 / 3.0, -1e300});
  return m;
}
// Zero bytes of a's dtype and shape (kiln::zeros has no f16 yet).
inline Array blank_like(const Array& a) {
  return Array(a.dtype(), a.shape(), HostBuffer::allocate(a.nbytes(), true));
}
// Same structure and statics, other values (what a fresh model would hold).
inline Model zeros_like_model(const Model& m) {
  return tree::map(blank_like, m);
}

}  // namespace ckpt_test
