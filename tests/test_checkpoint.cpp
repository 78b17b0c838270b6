// Checkpoints: round trips of every node kind and dtype, numpy reading kiln's
// files (and kiln reading numpy's .npy encoding), per-path template errors
// and atomic saves. Damaged files: test_checkpoint_corrupt.cpp; the member
// layout (manifest, optimizer state names, older files):
// test_checkpoint_layout.cpp.
#include "checkpoint/helpers.hpp"

namespace ckpt_test {

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

Array negate(const Array& x) { return neg(x); }

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
    CHECK(m[0].first == "__kiln_manifest__.npy");
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
  for (const auto& [name, data] : read_zip(dir / "d.npz"))
    names.push_back(name);
  CHECK(names == std::vector<std::string>{
                     "__kiln_manifest__.npy", "[\"a%2Fb\"].npy",
                     "[\"caf%C3%A9 100%25\"].npy", "[\"plain\"].npy"});
  const auto back = load_checkpoint(dir / "d.npz", d);
  CHECK(back.at("caf\xc3\xa9 100%").item<float>() == 2);
}

TEST_CASE("the manifest records the TreeDef, None slots and static values") {
  TempDir dir;
  save_checkpoint(dir / "m.npz", make_model());
  Members m = read_zip(dir / "m.npz");
  const std::string text = manifest_text(member(m, kManifest));
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

TEST_CASE("an engaged optional is recorded as its value; nested optionals load back") {
  TempDir dir;
  using Tree3 = std::tuple<std::optional<Array>, std::optional<std::optional<int>>,
                           std::optional<std::vector<Array>>>;
  const Tree3 t{scalar<float>(1), std::optional<int>(), std::vector<Array>{scalar<float>(2)}};
  save_checkpoint(dir / "o.npz", t);
  Members m = read_zip(dir / "o.npz");
  const std::string text = manifest_text(member(m, kManifest));
  // The file format has no optional record (files from before the node load).
  CHECK(text.find("\ntuple\t3\t\n") != std::string::npos);
  CHECK(text.find("\narray\t0\t[0]\tf32\t\t[0].npy\n") != std::string::npos);
  CHECK(text.find("\nnullopt\t0\t[1]\n") != std::string::npos);
  CHECK(text.find("\nlist\t1\t[2]\n") != std::string::npos);
  const Tree3 back = load_checkpoint(dir / "o.npz", t);
  CHECK(std::get<0>(back)->item<float>() == 1.0f);
  REQUIRE(std::get<1>(back).has_value());
  CHECK(!std::get<1>(back)->has_value());
  CHECK(std::get<2>(back)->at(0).item<float>() == 2.0f);
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
    const std::string cmd =
        std::string(python) + " " + script + " check " + file.string();
    CHECK(std::system(cmd.c_str()) == 0);
  }
}

TEST_CASE(
    "bf16 arrays are saved as numpy '<u2' words, recorded as bf16 in the "
    "manifest, and load back as bf16; numpy reads the values") {
  const char* python = std::getenv("KILN_PYTHON");
  const char* script = std::getenv("KILN_CHECKPOINT_SCRIPT");
  REQUIRE(python != nullptr);
  REQUIRE(script != nullptr);
  TempDir dir;
  // 1, pi, -2, NaN, the smallest subnormal, -inf: tests/checkpoint/read_npz.py
  // expects these.
  const std::map<std::string, Array> tree{
      {"w", bf16_from_bits({0x3f80, 0x4049, 0xc000, 0x7fc0, 0x0001, 0xff80})},
      {"h", f16_from_bits({0x3C00})}};
  const fs::path file = dir / "b.npz";
  save_checkpoint(file, tree);
  Members m = read_zip(file);
  CHECK(manifest_text(member(m, kManifest))
            .find("\narray\t0\t[\"w\"]\tbf16\t6\t[\"w\"].npy\n") !=
        std::string::npos);
  CHECK(member(m, "[\"w\"].npy").find("'descr': '<u2'") != std::string::npos);

  const auto back = load_checkpoint(file, tree::map(blank_like, tree));
  CHECK(back.at("w").dtype() == kiln::bf16);
  check_identical_leaves(back, tree);

  // The manifest decides: a template that wants f16 there is told so.
  auto like = tree;
  like["w"] = f16_from_bits({0, 0, 0, 0, 0, 0});
  CHECK_THROWS_WITH_AS(load_checkpoint(file, like),
                       doctest::Contains("[load_checkpoint] [\"w\"]: dtype "
                                         "bf16 in file, f16 in template"),
                       TreeError);

  const std::string cmd =
      std::string(python) + " " + script + " bf16 " + file.string();
  CHECK(std::system(cmd.c_str()) == 0);
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

TEST_CASE(
    "arrays are read through Buffer::read and loaded to the template's "
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
  CHECK_THROWS_WITH_AS(save_checkpoint(dir / "missing" / "m.npz", v1),
                       doctest::Contains(("[save_checkpoint] " +
                                          (dir / "missing" / "m.npz").string() +
                                          ": cannot create ")
                                             .c_str()),
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
                        "file, (4,) in template" +
                        where)
                           .c_str(),
                       TreeError);

  like = zeros_like_model(saved);
  like.half = zeros({4}, kiln::f32);
  CHECK_THROWS_WITH_AS(load_checkpoint(file, like),
                       ("[load_checkpoint] half: dtype f16 in file, f32 in "
                        "template" +
                        where)
                           .c_str(),
                       TreeError);

  like = zeros_like_model(saved);
  like.layers[0].bias = zeros({3});
  CHECK_THROWS_WITH_AS(load_checkpoint(file, like),
                       ("[load_checkpoint] layers[0].bias: None in file, "
                        "array in template" +
                        where)
                           .c_str(),
                       TreeError);

  like = zeros_like_model(saved);
  like.depth = 3;
  CHECK_THROWS_WITH_AS(load_checkpoint(file, like),
                       ("[load_checkpoint] depth: static value 2 in file, 3 "
                        "in template" +
                        where)
                           .c_str(),
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
       "template" +
       where)
          .c_str(),
      TreeError);
  CHECK_THROWS_WITH_AS(
      load_checkpoint(file, b::Other{scalar<float>(0)}),
      ("[load_checkpoint] <root>: Net in file, Other in template" + where)
          .c_str(),
      TreeError);
  CHECK_THROWS_WITH_AS(
      load_checkpoint(file, c::Net{scalar<float>(0)}),
      ("[load_checkpoint] <root>: fields (w, k) in file, (w, j) in "
       "template" +
       where)
          .c_str(),
      TreeError);
  CHECK(load_checkpoint(file, a::Net{scalar<float>(0)}).w.item<float>() == 1);
}
