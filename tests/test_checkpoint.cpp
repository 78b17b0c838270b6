// Checkpoints: round trips of every node kind and dtype, numpy reading kiln's
// files (and kiln reading numpy's .npy encoding), per-path template errors,
// atomic saves, and damaged files giving kiln errors (never crashes).
#include <doctest/doctest.h>
#include <unistd.h>
#include <unzip.h>
#include <zip.h>

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

using namespace kiln;
namespace fs = std::filesystem;

namespace ckpt_test {

// A fresh directory per test, removed afterwards. In memory where possible:
// the corruption tests rewrite a file thousands of times, and on an ext4 with
// online discard each truncating rewrite takes milliseconds.
fs::path scratch_root() {
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
    path = scratch_root() /
           ("kiln_ckpt_test_" + std::to_string(::getpid()) + "_" +
            std::to_string(counter++));
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

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Zip members by name, in archive order (to tamper with a checkpoint).
using Members = std::vector<std::pair<std::string, std::string>>;
Members read_zip(const fs::path& p) {
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
void write_zip(const fs::path& p, const Members& members) {
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
std::string& member(Members& m, const std::string& name) {
  for (auto& [n, data] : m) {
    if (n == name) return data;
  }
  FAIL("no member " << name);
  static std::string none;
  return none;
}
// A .npy member with the given header dict and data bytes (version 1.0).
std::string npy(const std::string& dict, const std::string& data) {
  std::string out = "\x93NUMPY\x01";
  out += '\0';
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>(dict.size() >> 8);
  return out + dict + data;
}

std::string bytes_of(const Array& a) {
  std::string out(a.buffer()->nbytes(), '\0');
  a.buffer()->read(out.data());
  return out.substr(0, a.nbytes());
}
// Same dtype, shape and bytes (NaN-safe, -0.0-exact).
bool identical(const Array& a, const Array& b) {
  if (a.is_null() || b.is_null()) return a.is_null() && b.is_null();
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         bytes_of(a) == bytes_of(b);
}
template <class T>
void check_identical_leaves(const T& got, const T& want) {
  const auto g = tree::leaves(got);
  const auto w = tree::leaves(want);
  REQUIRE(g.size() == w.size());
  const auto paths = tree::paths(want);
  for (std::size_t i = 0; i < g.size(); ++i) {
    INFO(paths[i]);
    CHECK(identical(g[i], w[i]));
  }
}

Array floats(std::vector<float> v, Shape s) { return array<float>(v, s); }
Array f16_from_bits(std::vector<std::uint16_t> bits) {
  auto buf = HostBuffer::allocate(bits.size() * 2);
  std::memcpy(buf->host_data(), bits.data(), bits.size() * 2);
  return Array(DType::kF16, Shape{static_cast<std::int64_t>(bits.size())},
               std::move(buf));
}

// Memory that can only be read through Buffer::read (as on a GPU); `fail`
// makes the read throw, like a device lost in the middle of a save.
class DeviceOnlyBuffer final : public Buffer {
 public:
  DeviceOnlyBuffer(std::string bytes, bool fail)
      : bytes_(std::move(bytes)), fail_(fail) {}
  Device device() const override { return Device::cpu(); }
  std::size_t nbytes() const override { return bytes_.size(); }
  void read(void* dst) const override {
    if (fail_) throw DeviceError("[test] device lost while reading");
    std::memcpy(dst, bytes_.data(), bytes_.size());
    ++reads;
  }
  mutable int reads = 0;

 private:
  std::string bytes_;
  bool fail_;
};
Array device_only(const Array& host, bool fail,
                  std::shared_ptr<DeviceOnlyBuffer>* out = nullptr) {
  auto buf = std::make_shared<DeviceOnlyBuffer>(bytes_of(host), fail);
  if (out != nullptr) *out = buf;
  return Array(host.dtype(), host.shape(), buf);
}

Array identity(const Array& x) { return x; }
Array negate(const Array& x) { return neg(x); }

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

Model make_model() {
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
Array blank_like(const Array& a) {
  return Array(a.dtype(), a.shape(), HostBuffer::allocate(a.nbytes(), true));
}
// Same structure and statics, other values (what a fresh model would hold).
Model zeros_like_model(const Model& m) { return tree::map(blank_like, m); }

enum class Mode { kTrain, kEval };

struct Block {
  Linear proj;
  std::optional<Linear> gate;
  std::array<Array, 2> norm;
  KILN_MODULE(Block, proj, gate, norm);
};

// Every node kind: struct, vector, std::array, map, tuple, pair, optional
// (engaged and not), kiln::Tree, None leaves, and static leaves of several
// types.
struct Rich {
  std::vector<Block> blocks;
  std::map<std::string, Array> stats;
  std::tuple<Array, int, Array> triple;
  std::pair<std::string, Array> named;
  std::optional<Array> maybe;
  std::optional<Array> present;
  Array step;
  Tree extra;
  Static<std::string> tag;
  double lr = 0.0;
  Mode mode = Mode::kTrain;
  Array (*activation)(const Array&) = identity;
  KILN_MODULE(Rich, blocks, stats, triple, named, maybe, present, step, extra,
              tag, lr, mode, activation);
};

Rich make_rich() {
  Rich r;
  r.blocks.push_back(Block{{floats({1, 2, 3, 4}, {2, 2}), floats({-1, 1}, {2})},
                           Linear{floats({9}, {1, 1}), Array()},
                           {floats({0.5f}, {1}), Array()}});
  r.blocks.push_back(Block{{floats({5, 6}, {1, 2}), Array()},
                           std::nullopt,
                           {Array(), array<double>({2.5})}});
  r.stats["mean"] = array<float>({0.1f, -0.0f});
  r.stats["n"] = scalar<std::int32_t>(-12);
  r.triple = {array<std::uint32_t>({1u, 2u, 3u}), 4, array<bool>({false})};
  r.named = {"ids", array<std::int32_t>({-3, 0, 3}, {3, 1})};
  r.present = f16_from_bits({0x8000, 0x0001});
  r.step = scalar<std::int32_t>(1000);
  r.extra = Tree::dict({{"w", floats({7, 8, 9}, {3})},
                        {"list", Tree::list({Tree(), scalar<float>(1.5f)})},
                        {"lr", 0.5}});
  r.tag = std::string("run\t1\n\"quoted\"");
  r.lr = 1e-3;
  r.mode = Mode::kEval;
  r.activation = negate;
  return r;
}

}  // namespace ckpt_test

using namespace ckpt_test;

TEST_CASE("a nested module round-trips bit for bit, with None and statics") {
  TempDir dir;
  const Rich saved = make_rich();
  save_checkpoint(dir / "rich.npz", saved);
  CHECK(dir.names() == std::vector<std::string>{"rich.npz"});

  Rich like = tree::map(blank_like, saved);
  const Rich loaded = load_checkpoint(dir / "rich.npz", like);
  check_identical_leaves(loaded, saved);
  CHECK(tree::structure(loaded) == tree::structure(saved));
  CHECK(tree::paths(loaded) == tree::paths(saved));
  CHECK(loaded.blocks[0].proj.weight.to_vector<float>() ==
        std::vector<float>{1, 2, 3, 4});
  CHECK(loaded.blocks[0].gate->bias.is_null());
  CHECK(loaded.blocks[1].proj.bias.is_null());
  CHECK(!loaded.blocks[1].gate.has_value());
  CHECK(loaded.blocks[1].norm[0].is_null());
  CHECK(!loaded.maybe.has_value());
  CHECK(loaded.step.item<std::int32_t>() == 1000);
  CHECK(loaded.stats.at("n").item<std::int32_t>() == -12);
  CHECK(std::get<1>(loaded.triple) == 4);
  CHECK(loaded.named.first == "ids");
  CHECK(*loaded.tag == "run\t1\n\"quoted\"");
  CHECK(loaded.lr == 1e-3);
  CHECK(loaded.mode == Mode::kEval);
  CHECK((loaded.activation == negate));
  // -0.0 survives (compared by bytes above, and here by sign).
  CHECK(std::signbit(loaded.stats.at("mean").to_vector<float>()[1]));
}

TEST_CASE("every dtype and 0-d arrays round-trip; a lone array is root.npy") {
  TempDir dir;
  for (const Array& a :
       {scalar<float>(-1.5f), scalar<std::int32_t>(-7),
        scalar<std::uint32_t>(0xfffffffeu), scalar<bool>(true),
        scalar<double>(1e-310), f16_from_bits({0x7E00}),
        array<bool>({true, false}, {2, 1}), zeros({0, 3}, kiln::f32)}) {
    INFO(a);
    save_checkpoint(dir / "a.npz", a);
    const Array back = load_checkpoint(dir / "a.npz", blank_like(a));
    CHECK(identical(back, a));
    const Members m = read_zip(dir / "a.npz");
    REQUIRE(m.size() == 2);
    CHECK(m[0].first == "__kiln_manifest__.txt");
    CHECK(m[1].first == "root.npy");
  }
}

TEST_CASE("members are named by tree path, escaped only where unsafe") {
  TempDir dir;
  std::map<std::string, Array> d{{"a/b", scalar<float>(1)},
                                 {"caf\xc3\xa9 100%", scalar<float>(2)},
                                 {"plain", scalar<float>(3)}};
  save_checkpoint(dir / "d.npz", d);
  std::vector<std::string> names;
  for (const auto& [name, data] : read_zip(dir / "d.npz")) names.push_back(name);
  CHECK(names == std::vector<std::string>{"__kiln_manifest__.txt",
                                          "[\"a%2Fb\"].npy",
                                          "[\"caf%C3%A9 100%25\"].npy",
                                          "[\"plain\"].npy"});
  const auto back = load_checkpoint(dir / "d.npz", d);
  CHECK(back.at("caf\xc3\xa9 100%").item<float>() == 2);
}

TEST_CASE("the manifest records the TreeDef, None slots and static values") {
  TempDir dir;
  save_checkpoint(dir / "m.npz", make_model());
  Members m = read_zip(dir / "m.npz");
  const std::string& text = member(m, "__kiln_manifest__.txt");
  CHECK(text.starts_with("kiln-checkpoint\t1\ntreedef\tModel(layers=["));
  CHECK(text.find("\nstruct\t8\t\tModel(layers, buffers, half, precise, head, "
                  "depth, name, activation)\n") != std::string::npos);
  CHECK(text.find("\nnone\t0\tlayers[0].bias\n") != std::string::npos);
  CHECK(text.find("\narray\t0\tlayers[0].weight\tf32\t2,3\tlayers[0].weight"
                  ".npy\n") != std::string::npos);
  CHECK(text.find("\narray\t0\tbuffers[\"count\"]\ti32\t\tbuffers[\"count\"]"
                  ".npy\n") != std::string::npos);
  CHECK(text.find("\nnullopt\t0\thead\n") != std::string::npos);
  CHECK(text.find("\nstatic\t0\tdepth\tint\t2\n") != std::string::npos);
  CHECK(text.find("\nstatic\t0\tactivation\t") != std::string::npos);
  // No .npy for None, statics or the empty optional.
  CHECK(m.size() == 1 + 8);
}

TEST_CASE("numpy.load reads a kiln checkpoint: names, dtypes, values") {
  const char* python = std::getenv("KILN_PYTHON");
  const char* script = std::getenv("KILN_CHECKPOINT_SCRIPT");
  REQUIRE_MESSAGE(python != nullptr, "KILN_PYTHON (python3 with numpy) unset");
  REQUIRE(script != nullptr);
  TempDir dir;
  const Model model = make_model();
  for (bool compress : {false, true}) {
    INFO("compress=" << compress);
    const fs::path file = dir / "model.npz";
    save_checkpoint(file, model, SaveOptions{.compress = compress});
    const std::string cmd = std::string(python) + " " + script + " check " +
                            file.string();
    CHECK(std::system(cmd.c_str()) == 0);
  }
}

TEST_CASE("kiln loads .npy members written by numpy itself (deflated)") {
  const char* python = std::getenv("KILN_PYTHON");
  const char* script = std::getenv("KILN_CHECKPOINT_SCRIPT");
  REQUIRE(python != nullptr);
  REQUIRE(script != nullptr);
  TempDir dir;
  const Model model = make_model();
  save_checkpoint(dir / "kiln.npz", model);
  const std::string cmd = std::string(python) + " " + script + " rewrite " +
                          (dir / "kiln.npz").string() + " " +
                          (dir / "numpy.npz").string();
  REQUIRE(std::system(cmd.c_str()) == 0);
  CHECK(read_file(dir / "kiln.npz") != read_file(dir / "numpy.npz"));
  check_identical_leaves(
      load_checkpoint(dir / "numpy.npz", zeros_like_model(model)), model);
}

TEST_CASE("equal trees give byte-identical files; compression is optional") {
  TempDir dir;
  const Model model = make_model();
  save_checkpoint(dir / "a.npz", model);
  save_checkpoint(dir / "b.npz", make_model());
  CHECK(read_file(dir / "a.npz") == read_file(dir / "b.npz"));
  Model big = model;
  big.precise = zeros({4096}, f64);
  save_checkpoint(dir / "stored.npz", big);
  save_checkpoint(dir / "deflated.npz", big, SaveOptions{.compress = true});
  CHECK(fs::file_size(dir / "deflated.npz") * 4 <
        fs::file_size(dir / "stored.npz"));
  check_identical_leaves(
      load_checkpoint(dir / "deflated.npz", zeros_like_model(big)), big);
}

TEST_CASE("arrays are read through Buffer::read and loaded to the template's "
          "device") {
  TempDir dir;
  Model model = make_model();
  std::shared_ptr<DeviceOnlyBuffer> buf;
  const Array host_weight = model.layers[1].weight;
  model.layers[1].weight = device_only(host_weight, false, &buf);
  REQUIRE(model.layers[1].weight.buffer()->host_data() == nullptr);
  save_checkpoint(dir / "m.npz", model);
  CHECK(buf->reads == 1);
  const Model back = load_checkpoint(dir / "m.npz", zeros_like_model(model));
  CHECK(identical(back.layers[1].weight, host_weight));
  CHECK(back.layers[1].weight.device() == Device::cpu());
  CHECK(back.layers[1].weight.buffer()->host_data() != nullptr);
}

TEST_CASE("a tracer cannot be saved") {
  TempDir dir;
  Linear l{Array::tracer(Aval{kiln::f32, {2}}, Device::cpu(), 1, 0), Array()};
  CHECK_THROWS_WITH_AS(
      save_checkpoint(dir / "t.npz", l),
      ("[save_checkpoint] " + (dir / "t.npz").string() +
       ": weight is a tracer (inside grad or jit); save concrete arrays")
          .c_str(),
      ValueError);
  CHECK(dir.names().empty());
}

TEST_CASE("a save that fails midway leaves the previous checkpoint intact") {
  TempDir dir;
  const fs::path file = dir / "model.npz";
  const Model v1 = make_model();
  save_checkpoint(file, v1);
  const std::string before = read_file(file);

  Model v2 = zeros_like_model(v1);
  // The last leaf fails, after the others were written to the temp file.
  v2.precise = device_only(v2.precise, /*fail=*/true);
  CHECK_THROWS_WITH_AS(save_checkpoint(file, v2),
                       "[test] device lost while reading", DeviceError);
  CHECK(read_file(file) == before);
  CHECK(dir.names() == std::vector<std::string>{"model.npz"});  // no temp
  check_identical_leaves(load_checkpoint(file, v2), v1);

  // A path that cannot be created, and one that cannot be replaced.
  CHECK_THROWS_WITH_AS(
      save_checkpoint(dir / "missing" / "m.npz", v1),
      doctest::Contains(("[save_checkpoint] " +
                         (dir / "missing" / "m.npz").string() +
                         ": cannot create ").c_str()),
      CheckpointError);
  CHECK_THROWS_WITH_AS(save_checkpoint(dir / "missing" / "m.npz", v1),
                       doctest::Contains("No such file or directory"),
                       CheckpointError);
  fs::create_directory(dir / "taken.npz");
  fs::create_directory(dir / "taken.npz" / "inside");
  CHECK_THROWS_WITH_AS(save_checkpoint(dir / "taken.npz", v1),
                       doctest::Contains(": cannot rename "), CheckpointError);
  CHECK(fs::is_directory(dir / "taken.npz" / "inside"));
  CHECK(dir.names() == std::vector<std::string>{"model.npz", "taken.npz"});
}

TEST_CASE("a template that differs names each path and what differs") {
  TempDir dir;
  const fs::path file = dir / "model.npz";
  const Model saved = make_model();
  save_checkpoint(file, saved);
  const std::string where = " (checkpoint " + file.string() + ")";

  Model like = zeros_like_model(saved);
  like.layers[1].bias = zeros({4});
  CHECK_THROWS_WITH_AS(load_checkpoint(file, like),
                       ("[load_checkpoint] layers[1].bias: shape (1,) in "
                        "file, (4,) in template" + where)
                           .c_str(),
                       TreeError);

  like = zeros_like_model(saved);
  like.half = zeros({4}, kiln::f32);
  CHECK_THROWS_WITH_AS(load_checkpoint(file, like),
                       ("[load_checkpoint] half: dtype f16 in file, f32 in "
                        "template" + where).c_str(),
                       TreeError);

  like = zeros_like_model(saved);
  like.layers[0].bias = zeros({3});
  CHECK_THROWS_WITH_AS(load_checkpoint(file, like),
                       ("[load_checkpoint] layers[0].bias: None in file, "
                        "array in template" + where).c_str(),
                       TreeError);

  like = zeros_like_model(saved);
  like.depth = 3;
  CHECK_THROWS_WITH_AS(load_checkpoint(file, like),
                       ("[load_checkpoint] depth: static value 2 in file, 3 "
                        "in template" + where).c_str(),
                       TreeError);
  // Statics can be left to the template.
  const Model loaded =
      load_checkpoint(file, like, LoadOptions{.check_statics = false});
  CHECK(loaded.depth == 3);
  check_identical_leaves(loaded, saved);

  like = zeros_like_model(saved);
  like.activation = negate;
  CHECK_THROWS_WITH_AS(load_checkpoint(file, like),
                       doctest::Contains("activation: static value "),
                       TreeError);

  // Several differences at once, one line each; no cascade under a list whose
  // length changed.
  like = zeros_like_model(saved);
  like.layers.push_back(like.layers[0]);
  like.buffers.erase("key");
  like.buffers["extra"] = zeros({1});
  like.buffers["mask"] = zeros({2, 2}, i32);
  like.head = Linear{zeros({1}), Array()};
  CHECK_THROWS_WITH_AS(
      load_checkpoint(file, like),
      ("[load_checkpoint] checkpoint " + file.string() +
       " does not match the template (6 differences):\n"
       "  layers: length 2 in file, 3 in template\n"
       "  buffers[\"extra\"]: not in file, array in template\n"
       "  buffers[\"mask\"]: dtype bool in file, i32 in template\n"
       "  buffers[\"mask\"]: shape (3,) in file, (2, 2) in template\n"
       "  buffers[\"key\"]: array in file, not in template\n"
       "  head: empty optional in file, Linear in template")
          .c_str(),
      TreeError);
}

namespace ckpt_test::a {
struct Net {
  Array w;
  int k = 2;
  KILN_MODULE(Net, w, k);
};
}  // namespace ckpt_test::a
namespace ckpt_test::b {
struct Net {
  Array w;
  float k = 2;
  KILN_MODULE(Net, w, k);
};
struct Other {
  Array w;
  int k = 2;
  KILN_MODULE(Other, w, k);
};
}  // namespace ckpt_test::b
namespace ckpt_test::c {
struct Net {
  Array w;
  int j = 2;
  KILN_MODULE(Net, w, j);
};
}  // namespace ckpt_test::c

TEST_CASE("struct types, field names and static types are checked too") {
  TempDir dir;
  const fs::path file = dir / "net.npz";
  save_checkpoint(file, a::Net{scalar<float>(1)});
  const std::string where = " (checkpoint " + file.string() + ")";
  CHECK_THROWS_WITH_AS(
      load_checkpoint(file, b::Net{scalar<float>(0)}),
      ("[load_checkpoint] k: static type int (2) in file, float (2) in "
       "template" + where).c_str(),
      TreeError);
  CHECK_THROWS_WITH_AS(
      load_checkpoint(file, b::Other{scalar<float>(0)}),
      ("[load_checkpoint] <root>: Net in file, Other in template" + where)
          .c_str(),
      TreeError);
  CHECK_THROWS_WITH_AS(
      load_checkpoint(file, c::Net{scalar<float>(0)}),
      ("[load_checkpoint] <root>: fields (w, k) in file, (w, j) in "
       "template" + where).c_str(),
      TreeError);
  CHECK(load_checkpoint(file, a::Net{scalar<float>(0)}).w.item<float>() == 1);
}

// ---- damaged files ----

// Loads `file` expecting a CheckpointError whose message contains `text`.
void check_corrupt(const fs::path& file, const Model& like,
                   const std::string& text) {
  INFO("expecting: " << text);
  CHECK_THROWS_WITH_AS(
      load_checkpoint(file, like),
      doctest::Contains(
          ("[load_checkpoint] " + file.string() + ": " + text).c_str()),
      CheckpointError);
}

TEST_CASE("missing, empty, non-zip and foreign zip files give clear errors") {
  TempDir dir;
  const Model like = zeros_like_model(make_model());
  check_corrupt(dir / "nope.npz", like, "cannot open: No such file");
  write_file(dir / "empty.npz", "");
  check_corrupt(dir / "empty.npz", like, "not a zip archive, or truncated");
  write_file(dir / "text.npz", std::string(5000, 'x'));
  check_corrupt(dir / "text.npz", like, "not a zip archive, or truncated");
  write_zip(dir / "numpy.npz",
            {{"w.npy", npy("{'descr': '<f4', 'fortran_order': False, "
                           "'shape': (1,), }\n",
                           std::string(4, '\0'))}});
  check_corrupt(dir / "numpy.npz", like,
                "no kiln manifest (__kiln_manifest__.txt): not a kiln "
                "checkpoint");
}

TEST_CASE("a truncated checkpoint fails to load at every length") {
  TempDir dir;
  const Model model = make_model();
  save_checkpoint(dir / "full.npz", model);
  const std::string bytes = read_file(dir / "full.npz");
  const Model like = zeros_like_model(model);
  int failures = 0;
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    write_file(dir / "cut.npz", bytes.substr(0, n));
    try {
      load_checkpoint(dir / "cut.npz", like);
      FAIL_CHECK("a file cut to " << n << " of " << bytes.size()
                                  << " bytes loaded");
    } catch (const CheckpointError& e) {
      ++failures;
      if (n == bytes.size() / 2) {
        CHECK(std::string(e.what()).find("not a zip archive, or truncated") !=
              std::string::npos);
      }
    }
  }
  CHECK(failures == static_cast<int>(bytes.size()));
}

TEST_CASE("flipped bytes give a kiln error or the original values, never a "
          "crash") {
  TempDir dir;
  const Model model = make_model();
  for (bool compress : {false, true}) {
    INFO("compress=" << compress);
    save_checkpoint(dir / "good.npz", model, SaveOptions{.compress = compress});
    const std::string bytes = read_file(dir / "good.npz");
    const Model like = zeros_like_model(model);
    std::size_t errors = 0, total = 0;
    for (std::size_t i = 0; i < bytes.size(); ++i) {
      for (unsigned char mask : {0x01, 0x80, 0xff}) {
        std::string bad = bytes;
        bad[i] = static_cast<char>(bad[i] ^ mask);
        write_file(dir / "bad.npz", bad);
        ++total;
        try {
          const Model got = load_checkpoint(dir / "bad.npz", like);
          INFO("byte " << i << " mask " << int(mask));
          check_identical_leaves(got, model);  // an unchecked field was hit
        } catch (const Error&) {
          ++errors;
        }
      }
    }
    MESSAGE(errors << " of " << total << " corruptions detected");
    // Only zip fields nobody checks (dates, "version made by", attributes,
    // about a fifth of the headers) pass, and then with the original values.
    CHECK(errors * 10 > total * 7);
  }
}

TEST_CASE("a corrupt array byte is a CRC error naming the member") {
  TempDir dir;
  const Model model = make_model();
  save_checkpoint(dir / "good.npz", model);
  std::string bytes = read_file(dir / "good.npz");
  // layers[1].weight starts 1.5, -2 (0x3fc00000, 0xc0000000): make it 1.5, 2.
  const std::string needle("\x00\x00\xc0\x3f\x00\x00\x00\xc0", 8);
  const std::size_t at = bytes.find(needle);
  REQUIRE(at != std::string::npos);
  REQUIRE(bytes.find(needle, at + 1) == std::string::npos);
  bytes[at + 7] = '\x40';
  write_file(dir / "bad.npz", bytes);
  check_corrupt(dir / "bad.npz", zeros_like_model(model),
                "member \"layers[1].weight.npy\": CRC mismatch (corrupt data)");
}

TEST_CASE("bad .npy headers, sizes and manifests give clear errors") {
  TempDir dir;
  const Model model = make_model();
  const Model like = zeros_like_model(model);
  save_checkpoint(dir / "good.npz", model);
  Members good = read_zip(dir / "good.npz");
  const std::string w = "layers[0].weight.npy";
  const std::string data(24, '\0');  // 2x3 f32
  auto dict = [](const std::string& descr, const std::string& order,
                 const std::string& shape) {
    return "{'descr': '" + descr + "', 'fortran_order': " + order +
           ", 'shape': " + shape + ", }\n";
  };
  auto tampered = [&](const std::string& name, std::string contents) {
    Members m = good;
    member(m, name) = std::move(contents);
    write_zip(dir / "bad.npz", m);
    return dir / "bad.npz";
  };
  const std::string prefix = "member \"" + w + "\": ";

  // The unmodified member, rewritten by the helper, still loads.
  check_identical_leaves(
      load_checkpoint(tampered(w, member(good, w)), like),
      model);
  check_corrupt(tampered(w, "\x93NUMPX\x01" + std::string(100, ' ')), like,
                prefix + "not npy data (bad magic)");
  check_corrupt(tampered(w, "\x93NUMPY\x07" + std::string(100, ' ')), like,
                prefix + "unsupported npy version 7.32");
  check_corrupt(tampered(w, std::string("\x93NUMPY\x01\x00\xff\x7f", 10) +
                                std::string(100, ' ')),
                like, prefix + "data ends early (truncated)");
  check_corrupt(tampered(w, std::string("\x93NUMPY\x02\x00\xff\xff\xff\x7f", 12)),
                like, prefix + "npy header of 2147483659 bytes is too long");
  check_corrupt(tampered(w, "\x93NUMPY"), like,
                prefix + "data ends early (truncated)");
  check_corrupt(tampered(w, npy(dict("<c8", "False", "(2, 3)"), data)), like,
                prefix + "unsupported dtype '<c8' (kiln reads |b1, <i4, <u4, "
                         "<f2, <f4, <f8)");
  check_corrupt(tampered(w, npy(dict(">f4", "False", "(2, 3)"), data)), like,
                prefix + "big-endian data ('>f4') is not supported");
  check_corrupt(tampered(w, npy(dict("<f4", "True", "(2, 3)"), data)), like,
                prefix + "Fortran-order arrays are not supported");
  check_corrupt(tampered(w, npy(dict("<f4", "False", "(2, x)"), data)), like,
                prefix + "bad npy header: expected a dimension at offset");
  check_corrupt(tampered(w, npy(dict("<f4", "False",
                                     "(99999999999, 99999999999)"),
                                data)),
                like, prefix + "bad npy header: element count too large");
  check_corrupt(tampered(w, npy("{'descr': '<f4', 'shape': (2, 3)}\n", data)),
                like,
                prefix + "bad npy header: missing 'descr', 'fortran_order' "
                         "or 'shape'");
  check_corrupt(tampered(w, npy(dict("<f4", "False", "(3, 2)"), data)), like,
                prefix + "npy header says f32 (3, 2), the manifest f32 (2, 3)");
  // Wrong element count: the data is short or long for the header's shape.
  const std::string original = member(good, w);
  check_corrupt(tampered(w, original.substr(0, original.size() - 4)), like,
                prefix + "holds 148 bytes, but a (2, 3) f32 array takes 152 "
                         "(wrong element count)");
  check_corrupt(tampered(w, original + "xxxx"), like,
                prefix + "holds 156 bytes, but a (2, 3) f32 array takes 152 "
                         "(wrong element count)");

  // A member the manifest names but the archive lacks.
  Members without = good;
  std::erase_if(without, [&](const auto& m) { return m.first == w; });
  write_zip(dir / "bad.npz", without);
  check_corrupt(dir / "bad.npz", like,
                "member \"layers[0].weight.npy\" for layers[0].weight is "
                "missing");

  // Manifests: another version, damaged records, a broken tree.
  const std::string manifest = "__kiln_manifest__.txt";
  const std::string text = member(good, manifest);
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    const std::size_t at = t.find(from);
    REQUIRE(at != std::string::npos);
    return t.replace(at, from.size(), to);
  };
  check_corrupt(tampered(manifest, replaced("kiln-checkpoint\t1", "kiln-checkpoint\t2")),
                like,
                "manifest version 2 is not supported (this kiln reads "
                "version 1)");
  check_corrupt(tampered(manifest, "PK garbage"), like,
                "corrupt manifest (line 1): unterminated line");
  check_corrupt(tampered(manifest, replaced("\tf32\t2,3\t", "\tf32\t2,-3\t")),
                like, "corrupt manifest (line 6): bad dimension '-3'");
  check_corrupt(tampered(manifest, replaced("\tf32\t2,3\t", "\tc64\t2,3\t")),
                like, "corrupt manifest (line 6): unknown dtype 'c64'");
  check_corrupt(tampered(manifest, replaced("list\t2\t", "list\t9\t")), like,
                "corrupt manifest (line ");
  check_corrupt(tampered(manifest, replaced("list\t2\t", "list\t1\t")), like,
                "corrupt manifest (line ");
  check_corrupt(tampered(manifest, replaced("\nnone\t0\t", "\nnone\t1\t")),
                like, "corrupt manifest (line 7): a leaf with children");
  check_corrupt(tampered(manifest, text.substr(0, text.size() - 1)), like,
                "corrupt manifest (line 20): unterminated line");
  check_corrupt(tampered(manifest, replaced("treedef\t", "treedef\t\\q")), like,
                "corrupt manifest (line 2): bad escape");
}
