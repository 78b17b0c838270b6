// Weights from other frameworks (runtime/weights.hpp): safetensors written by
// the safetensors library and .npz written by numpy (tests/golden/, from
// make_weights_golden.py), kiln's own safetensors round trip for every dtype,
// loading named arrays into a module tree by path, and damaged files refused
// with messages that say what is wrong.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <kiln/kiln.hpp>
#include <kiln/runtime/weights.hpp>
#include <string>
#include <unistd.h>
#include <vector>

#include "error_text.hpp"

using namespace kiln;

namespace {

std::filesystem::path golden(const std::string& file) {
  const char* dir = std::getenv("KILN_GOLDEN_DIR");
  return std::filesystem::path(dir ? dir : "tests/golden") / file;
}

std::filesystem::path scratch(const std::string& name) {
  return std::filesystem::temp_directory_path() /
         ("kiln-weights-" + std::to_string(::getpid()) + "-" + name);
}

const Array& find(const NamedArrays& w, const std::string& name) {
  for (const NamedArray& n : w) {
    if (n.name == name) return n.array;
  }
  FAIL("no array named " << name);
  static Array none;
  return none;
}

std::string bytes_of(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void write_bytes(const std::filesystem::path& p, const std::string& s) {
  std::ofstream(p, std::ios::binary) << s;
}

// The tensors of make_weights_golden.py (the file's I64 one aside).
void check_golden_values(const NamedArrays& w) {
  const Array& fc1 = find(w, "fc1.weight");
  CHECK(fc1.dtype() == f32);
  CHECK(fc1.shape() == Shape{3, 4});
  const std::vector<float> v = fc1.to_vector<float>();
  for (std::size_t i = 0; i < v.size(); ++i) CHECK(v[i] == static_cast<float>(i) * 0.25f);
  const Array& bias = find(w, "fc1.bias");
  CHECK(bias.dtype() == f16);
  CHECK(astype(bias, f32).to_vector<float>() == std::vector<float>{-1, 0, 1});
  const Array& fc2 = find(w, "fc2.weight");
  CHECK(fc2.dtype() == f64);
  CHECK(fc2.to_vector<double>() == std::vector<double>{0, 0.125, 0.25, 0.375, 0.5, 0.625});
  CHECK(find(w, "steps").to_vector<std::int32_t>() == std::vector<std::int32_t>{0, 3, 6, 9});
  CHECK(find(w, "mask").to_vector<bool>() == std::vector<bool>{true, false, true});
}

struct TwoLayers {
  Array w1, b1, w2;
  std::vector<Array> extra;
  KILN_MODULE(TwoLayers, w1, b1, w2, extra);
};

}  // namespace

TEST_CASE("read_safetensors reads a file the safetensors library wrote, value for value") {
  // position_ids is I64, which kiln lacks: refused by name, or left out.
  CHECK_THROWS_WITH_AS(read_safetensors(golden("weights.safetensors")),
                       doctest::Contains("tensor \"position_ids\" has dtype I64, which kiln does not have"),
                       CheckpointError);
  const NamedArrays w = read_safetensors(golden("weights.safetensors"), {.skip_unsupported_dtypes = true});
  CHECK(w.size() == 5);
  check_golden_values(w);
  // Only the selected names are read.
  const NamedArrays some = read_safetensors(
      golden("weights.safetensors"), {.select = [](const std::string& n) { return n.starts_with("fc1"); }});
  CHECK(some.size() == 2);
}

TEST_CASE("read_npz reads numpy.savez archives without a kiln manifest") {
  CHECK_THROWS_WITH_AS(read_npz(golden("weights.npz")), doctest::Contains("unsupported dtype '<i8'"),
                       CheckpointError);
  const NamedArrays w = read_npz(golden("weights.npz"), {.skip_unsupported_dtypes = true});
  CHECK(w.size() == 5);
  CHECK(w[0].name == "fc1.bias");  // name order
  check_golden_values(w);
}

TEST_CASE("write_safetensors round-trips every dtype, and load_weights fills a module by path") {
  const auto path = scratch("all.safetensors");
  NamedArrays all{
      {"a.f32", array<float>({1.5f, -2.0f, 3.25f}, {3})},
      {"a.f64", array<double>({1e-300, 2.0}, {2, 1})},
      {"a.f16", astype(array<float>({0.5f, 65504.0f}, {2}), f16)},
      {"a.bf16", astype(array<float>({1.0f, -3.0f, 1e30f}, {3}), bf16)},
      {"a.i32", array<std::int32_t>({-7, 0, 2147483647}, {3})},
      {"a.u32", array<std::uint32_t>({4294967295u}, {1})},
      {"a.bool", array<bool>({true, false}, {2})},
      {"empty", zeros({0, 4}, f32)},
      {"scalar", array<float>({42.0f}, {})},
  };
  write_safetensors(path, all, {{"framework", "kiln"}});
  const NamedArrays back = read_safetensors(path);
  REQUIRE(back.size() == all.size());
  for (std::size_t i = 0; i < all.size(); ++i) {
    CAPTURE(all[i].name);
    CHECK(back[i].name == all[i].name);  // the data's order is the writer's
    CHECK(back[i].array.dtype() == all[i].array.dtype());
    CHECK(back[i].array.shape() == all[i].array.shape());
    CHECK(astype(back[i].array, f64).to_vector<double>() == astype(all[i].array, f64).to_vector<double>());
  }
  // The header is 8-byte aligned JSON with the metadata.
  const std::string raw = bytes_of(path);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(raw[i]);
  CHECK(n % 8 == 0);
  CHECK(raw.substr(8, n).find("\"__metadata__\":{\"framework\":\"kiln\"}") != std::string::npos);
  CHECK_THROWS_WITH_AS(write_safetensors(path, {{"x", all[0].array}, {"x", all[1].array}}),
                       doctest::Contains("two arrays are named \"x\""), ValueError);
  CHECK_THROWS_WITH_AS(write_safetensors(path, {{"__metadata__", all[0].array}}),
                       doctest::Contains(": the name __metadata__ is reserved"), ValueError);
  CHECK_THROWS_WITH_AS(write_safetensors(path, {{"w", Array()}}), doctest::Contains(": \"w\" is None"),
                       ValueError);
  CHECK(read_safetensors(path).size() == all.size());  // the refused writes left the file

  // A module from named arrays (renamed), and back.
  TwoLayers like{zeros({2, 3}, f32), zeros({3}, f32), zeros({3, 1}, bf16), {zeros({2}, i32)}};
  NamedArrays file{{"layer1.weight", array<float>({1, 2, 3, 4, 5, 6}, {2, 3})},
                   {"layer1.bias", array<float>({0.5f, 0.25f, 0.125f}, {3})},
                   {"layer2.weight", array<float>({1, -1, 2}, {3, 1})},
                   {"extra.0", array<std::int32_t>({9, 8}, {2})}};
  const auto rename = [](const std::string& p) {
    if (p == "w1") return std::string("layer1.weight");
    if (p == "b1") return std::string("layer1.bias");
    if (p == "w2") return std::string("layer2.weight");
    return std::string("extra.0");
  };
  // w2 is bf16 in the model: converted only when asked.
  CHECK_THROWS_WITH_AS(load_weights(file, like, {.name = rename}),
                       "[load_weights] w2: dtype f32 in file (\"layer2.weight\"), bf16 in template "
                       "(convert_floats converts)",
                       TreeError);
  const TwoLayers m = load_weights(file, like, {.name = rename, .convert_floats = true});
  CHECK(m.w1.to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
  CHECK(m.w2.dtype() == bf16);
  CHECK(astype(m.w2, f32).to_vector<float>() == std::vector<float>{1, -1, 2});
  CHECK(m.extra[0].to_vector<std::int32_t>() == std::vector<std::int32_t>{9, 8});
  const NamedArrays named = named_arrays(m);
  REQUIRE(named.size() == 4);
  CHECK(named[0].name == "w1");
  CHECK(named[3].name == "extra[0]");
  std::filesystem::remove(path);
}

TEST_CASE("load_weights reports every difference from the template at once") {
  const TwoLayers like{zeros({2, 3}, f32), zeros({3}, f32), zeros({3, 1}, f32), {}};
  const NamedArrays file{{"w1", zeros({3, 2}, f32)},
                         {"w2", zeros({3, 1}, i32)},
                         {"stray", zeros({1}, f32)}};
  CHECK_THROWS_WITH_AS(load_weights(file, like),
                       "[load_weights] the weights do not fit the template (4 differences):\n"
                       "  w1: shape (3, 2) in file (\"w1\"), (2, 3) in template\n"
                       "  b1: no array named \"b1\" in the file\n"
                       "  w2: dtype i32 in file (\"w2\"), f32 in template\n"
                       "  \"stray\" in the file: no leaf takes it (allow_unused ignores it)",
                       TreeError);
}

TEST_CASE("damaged safetensors files are refused with what is wrong, never a crash") {
  const std::string good = bytes_of(golden("weights.safetensors"));
  const auto path = scratch("bad.safetensors");
  const auto refused = [&](const std::string& bytes, const std::string& what) {
    CAPTURE(what);
    write_bytes(path, bytes);
    CHECK_THROWS_WITH_AS(read_safetensors(path, {.skip_unsupported_dtypes = true}),
                         doctest::Contains(what.c_str()), CheckpointError);
  };
  const auto with_header = [&](const std::string& json, const std::string& data) {
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(json.size() >> (8 * i));
    return out + json + data;
  };
  refused("", "truncated: 0 bytes");
  refused(good.substr(0, 100), "truncated: the header says");
  refused(good.substr(0, good.size() - 3), "outside the");
  refused(with_header("{\"a\": ", ""), "the header is not JSON");
  refused(with_header("[1, 2]", ""), "the header is not a JSON object");
  refused(std::string("\xff\xff\xff\xff\xff\xff\xff\xff", 8), "over the 100 MB limit");
  refused(with_header(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})", "12345678"),
          "tensor \"a\": a (2,) F32 tensor needs 8 bytes, data_offsets give 4");
  refused(with_header(R"({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", "12345678"),
          "a dimension is not a non-negative integer");
  refused(with_header(R"({"a": {"dtype": "F32", "shape": [4294967296, 4294967296, 4294967296], "data_offsets": [0, 8]}})",
                      "12345678"),
          "its element count overflows");
  refused(with_header(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                          "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                      "12345678"),
          "tensors \"a\" and \"b\" overlap");
  refused(with_header(R"({"a": {"dtype": "F32", "shape": [2]}})", ""),
          "missing \"dtype\", \"shape\" or \"data_offsets\"");
  refused(with_header(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}})", "12345678"),
          "data_offsets [8, 4] outside the 8 bytes of data");
  CHECK_THROWS_WITH_AS(read_safetensors(scratch("missing")), doctest::Contains("cannot open"),
                       CheckpointError);
  std::filesystem::remove(path);
}
