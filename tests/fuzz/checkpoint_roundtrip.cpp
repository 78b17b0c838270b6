// libFuzzer target: the checkpoint writer and reader together
// (runtime/checkpoint.cpp, runtime/checkpoint_read.cpp). The input describes a
// tree of arrays: a map with arbitrary string keys (so member names and
// manifest paths take any bytes), arrays of any dtype, rank and size holding
// the input's bytes, or, for one narrow input form, 65,530-65,541 scalars
// (past the zip format's 65,535 members without zip64, where minizip writes
// the count as 0xFFFF). A tree that saves must load back with the same dtypes,
// shapes and bytes: the writer refuses, before writing, whatever its reader
// would not read back. A refusal (a kiln::Error from save) is a fine answer;
// any failure to load what was saved is a finding.
//
// Input: a flags byte (bit 0: deflate the members), then records while bytes
// remain (at most 64): key length (% 16) and key bytes, dtype (% 7), rank
// (% 4), each dim (% 5); the values are the input's bytes, repeated. A 2-byte
// input {2, n} is the many scalars instead (65,530 + n % 12 of them, and an f32
// "x"): ~6 s an input under ASan, so the form is that narrow (libFuzzer learns
// the constants its input is compared with: a wider form took most of a run).
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fuzz.hpp"
#include "kiln/runtime/buffer.hpp"
#include "kiln/runtime/checkpoint.hpp"
#include "kiln/runtime/checkpoint_read.hpp"
#include "kiln/runtime/tree.hpp"

namespace {

using Arrays = std::pair<std::map<std::string, kiln::Array>, std::vector<kiln::Array>>;

struct Input {
  std::string_view bytes;
  std::size_t pos = 0;
  bool done() const { return pos >= bytes.size(); }
  unsigned char byte() { return done() ? 0 : static_cast<unsigned char>(bytes[pos++]); }
};

constexpr kiln::DType kDTypes[] = {kiln::DType::kBool, kiln::DType::kI32, kiln::DType::kU32,
                                   kiln::DType::kF32,  kiln::DType::kF64, kiln::DType::kF16,
                                   kiln::DType::kBF16};

kiln::Array make_array(kiln::DType dtype, kiln::Shape shape, std::string_view fill) {
  const std::size_t n = static_cast<std::size_t>(kiln::shape_size(shape, kiln::size_of(dtype)).bytes);
  auto buf = kiln::HostBuffer::allocate(n, true);
  auto* out = static_cast<unsigned char*>(buf->host_data());
  for (std::size_t i = 0; i < n && !fill.empty(); ++i) {
    out[i] = static_cast<unsigned char>(fill[i % fill.size()]);
    if (dtype == kiln::DType::kBool) out[i] &= 1;  // kiln's bools are 0 or 1
  }
  return kiln::Array(dtype, std::move(shape), std::move(buf));
}


}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace kiln;
  static const std::filesystem::path path = kiln::fuzz::scratch_file("roundtrip.npz");
  Input in{std::string_view(reinterpret_cast<const char*>(data), size)};
  const unsigned char flags = in.byte();
  SaveOptions options;
  options.compress = (flags & 1) != 0;
  Arrays model;
  if (size == 2 && flags == 2) {
    const std::size_t many = 65530 + in.byte() % 12;
    model.second.reserve(many);
    for (std::size_t i = 0; i < many; ++i) {
      model.second.push_back(make_array(DType::kU32, {}, std::string_view(
          reinterpret_cast<const char*>(&i), sizeof(std::uint32_t))));
    }
    model.first["x"] = make_array(DType::kF32, {2}, in.bytes);
  }
  for (int record = 0; record < 64 && !in.done(); ++record) {
    std::string key;
    for (unsigned len = in.byte() % 16; len > 0; --len) key += static_cast<char>(in.byte());
    const DType dtype = kDTypes[in.byte() % 7];
    Shape shape;
    for (unsigned rank = in.byte() % 4; rank > 0; --rank) shape.push_back(in.byte() % 5);
    model.first[key] = make_array(dtype, std::move(shape), in.bytes);
  }
  std::filesystem::remove(path);
  try {
    save_checkpoint(path, model, options);
  } catch (const kiln::Error&) {
    return 0;  // refused before writing
  }
  // Not inside fuzz::run: an error loading what was saved is a finding.
  const tree::Flat like = tree::flatten(model);
  const std::vector<Array> got = detail::ckpt::read_checkpoint(path, like.def, like.leaves, true);
  fuzz::require(got.size() == like.leaves.size(), "one array per saved leaf");
  for (std::size_t i = 0; i < got.size(); ++i) {
    const Array& want = like.leaves[i];
    fuzz::require(got[i].aval() == want.aval(), "the saved dtype and shape");
    fuzz::require(want.nbytes() == 0 ||
                      std::memcmp(got[i].buffer()->host_data(), want.buffer()->host_data(),
                                  want.nbytes()) == 0,
                  "the saved bytes");
  }
  return 0;
}
