// The members a numpy user sees in a checkpoint: the manifest as an array,
// optimizer state named by parameter path (and a struct's own member names),
// and files written before both still loading.
#include "checkpoint/helpers.hpp"

using namespace ckpt_test;

namespace {

std::vector<std::string> member_names(const fs::path& file) {
  std::vector<std::string> out;
  for (const auto& [name, data] : read_zip(file)) out.push_back(name);
  return out;
}

// What a training loop holds before its first step.
TrainState fresh_train_state() {
  TrainState t;
  t.model.layers = zeros_like_model(make_model()).layers;
  t.opt_state = optim::adam(1e-3).init(optim::gradient_template(t.model));
  return t;
}

// Pair names its members by its `tag`: 0 gives both arrays one name, 1 a
// suffix, 2 the manifest's name.
struct Pair {
  Array a;
  Array b;
  int tag = 1;
  KILN_MODULE(Pair, a, b, tag);
  static void kiln_member_paths(std::span<const StaticValue> statics,
                                std::span<std::string> paths) {
    const int tag = *statics[0].get_if<int>();
    for (std::string& p : paths) {
      p = tag == 0 ? "same" : tag == 1 ? p + "_1" : "__kiln_manifest__";
    }
  }
};

}  // namespace

TEST_CASE("optimizer state members are named by the parameter's path") {
  TempDir dir;
  const TrainState saved = make_train_state();
  save_checkpoint(dir / "train.npz", saved);
  CHECK(member_names(dir / "train.npz") ==
        std::vector<std::string>{
            kManifest,
            "model.layers[0].weight.npy",
            "model.layers[1].weight.npy",
            "model.layers[1].bias.npy",
            "opt_state.stages[0].mu.layers[0].weight.npy",
            "opt_state.stages[0].mu.layers[1].weight.npy",
            "opt_state.stages[0].mu.layers[1].bias.npy",
            "opt_state.stages[0].nu.layers[0].weight.npy",
            "opt_state.stages[0].nu.layers[1].weight.npy",
            "opt_state.stages[0].nu.layers[1].bias.npy",
            "opt_state.stages[0].scalars[\"count\"].npy",
            "opt_state.stages[1].scalars[\"learning_rate\"].npy",
        });
  Members m = read_zip(dir / "train.npz");
  // The member holds that parameter's buffer (slot 2: layers[1].weight).
  const Array& mu = saved.opt_state.stages[0].leaves.at("mu")[2];
  const std::string& member_data =
      member(m, "opt_state.stages[0].mu.layers[1].weight.npy");
  CHECK(member_data.substr(member_data.size() - mu.nbytes()) == bytes_of(mu));
  // The manifest keeps the tree path and records the member.
  CHECK(manifest_text(member(m, kManifest))
            .find("\narray\t0\topt_state.stages[0].leaves[\"mu\"][2]\tf32\t3,"
                  "1\topt_state.stages[0].mu.layers[1].weight.npy\n") !=
        std::string::npos);

  // Loaded into a fresh state: same values, same structure (the jit key).
  const TrainState loaded =
      load_checkpoint(dir / "train.npz", fresh_train_state());
  check_identical_leaves(loaded, saved);
  CHECK(tree::structure(loaded) == tree::structure(saved));

  // A state saved on its own.
  save_checkpoint(dir / "state.npz", saved.opt_state);
  const auto names = member_names(dir / "state.npz");
  CHECK(names[1] == "stages[0].mu.layers[0].weight.npy");
  check_identical_leaves(
      load_checkpoint(dir / "state.npz", fresh_train_state().opt_state),
      saved.opt_state);
}

TEST_CASE("buffer keys that are not plain names keep their quoted form") {
  TempDir dir;
  const Mlp model = make_train_state().model;
  optim::State s;
  s.gradient_structure = tree::structure(optim::gradient_template(model));
  s.stages.resize(1);
  s.stages[0].kind = "custom";
  const Array w = model.layers[1].weight;
  s.stages[0].leaves["odd key"] = {Array(), Array(), w, Array()};
  s.stages[0].leaves["scalars"] = {Array(), Array(), w, Array()};
  // More entries than the gradient has slots: the extra one keeps its index.
  s.stages[0].leaves["v"] = {Array(), Array(), Array(), Array(), w};
  save_checkpoint(dir / "s.npz", s);
  CHECK(member_names(dir / "s.npz") ==
        std::vector<std::string>{
            kManifest,
            "stages[0].leaves[\"odd key\"].layers[1].weight.npy",
            "stages[0].leaves[\"scalars\"].layers[1].weight.npy",
            "stages[0].leaves[\"v\"][4].npy",
        });
  check_identical_leaves(load_checkpoint(dir / "s.npz", s), s);
}

TEST_CASE("a checkpoint written before issue 18 (text manifest) still loads") {
  const char* script = std::getenv("KILN_CHECKPOINT_SCRIPT");
  REQUIRE(script != nullptr);
  const fs::path old_file =
      fs::path(script).parent_path() / "v1_train_state.npz";
  const auto old_names = member_names(old_file);
  REQUIRE(old_names.size() == 12);
  CHECK(old_names[0] == "__kiln_manifest__.txt");
  CHECK(old_names[4] == "opt_state.stages[0].leaves[\"mu\"][0].npy");

  const TrainState got = load_checkpoint(old_file, fresh_train_state());
  const TrainState want = make_train_state();
  check_identical_leaves(got.model, want.model);
  const auto& adam = got.opt_state.stages[0];
  CHECK(adam.scalars.at("count").item<std::int32_t>() == 1);
  const std::vector<float> w = want.model.layers[1].weight.to_vector<float>();
  const std::vector<float> mu = adam.leaves.at("mu")[2].to_vector<float>();
  const std::vector<float> nu = adam.leaves.at("nu")[2].to_vector<float>();
  REQUIRE(mu.size() == w.size());
  for (std::size_t i = 0; i < w.size(); ++i) {
    CHECK(mu[i] == doctest::Approx(0.1 * w[i]));
    CHECK(nu[i] == doctest::Approx(0.001 * w[i] * w[i]));
  }
  CHECK(adam.leaves.at("mu")[1].is_null());

  // Saved again, it has the new layout.
  TempDir dir;
  save_checkpoint(dir / "new.npz", got);
  const auto names = member_names(dir / "new.npz");
  CHECK(names[0] == kManifest);
  CHECK(names[4] == "opt_state.stages[0].mu.layers[0].weight.npy");
  check_identical_leaves(load_checkpoint(dir / "new.npz", fresh_train_state()),
                         got);
}

TEST_CASE(
    "a struct's kiln_member_paths names its members; clashes are errors") {
  TempDir dir;
  const std::vector<Pair> pairs{{scalar<float>(1), scalar<float>(2), 1}};
  save_checkpoint(dir / "p.npz", pairs);
  CHECK(member_names(dir / "p.npz") ==
        std::vector<std::string>{kManifest, "[0].a_1.npy", "[0].b_1.npy"});
  const auto back = load_checkpoint(
      dir / "p.npz",
      std::vector<Pair>{{scalar<float>(0), scalar<float>(0), 1}});
  CHECK(back[0].b.item<float>() == 2);

  const std::string file = (dir / "bad.npz").string();
  CHECK_THROWS_WITH_AS(
      save_checkpoint(
          file, std::vector<Pair>{{scalar<float>(1), scalar<float>(2), 0}}),
      ("[save_checkpoint] " + file +
       ": [0].a and [0].b would both be stored as member \"[0].same.npy\"")
          .c_str(),
      CheckpointError);
  CHECK_THROWS_WITH_AS(
      save_checkpoint(file, Pair{scalar<float>(1), Array(), 2}),
      ("[save_checkpoint] " + file +
       ": the manifest and a would both be stored as member "
       "\"__kiln_manifest__.npy\"")
          .c_str(),
      CheckpointError);
  CHECK(dir.names() == std::vector<std::string>{"p.npz"});
}

TEST_CASE("an optimizer state saved for another model: the error names each parameter") {
  TempDir dir;
  auto adam_for = [](const nn::MLP& m) {
    return optim::adam(1e-3).init(optim::gradient_template(m));
  };
  // Saved for an MLP 3 -> 4 -> 2 (layers[0]: 4 x 3, layers[1]: 2 x 4).
  save_checkpoint(dir / "opt.npz", adam_for(nn::MLP(3, 2, 4, 1, random::key(0))));
  auto error = [&](const optim::State& like) {
    try {
      (void)load_checkpoint(dir / "opt.npz", like);
    } catch (const TreeError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  // Same structure, other widths: each buffer by its parameter's path, then its slot.
  const std::string wider = error(adam_for(nn::MLP(3, 2, 5, 1, random::key(0))));
  CHECK(wider.find("opt_state") == std::string::npos);  // the state is the root here
  CHECK(wider.find("\n  stages[0].mu.layers[0].weight (stages[0].leaves[\"mu\"][0]): shape "
                   "(4, 3) in file, (5, 3) in template\n") != std::string::npos);
  CHECK(wider.find("\n  stages[0].nu.layers[1].bias") == std::string::npos);  // (2,): equal
  CHECK(wider.find("\n  stages[0].nu.layers[1].weight (stages[0].leaves[\"nu\"][2]): shape "
                   "(2, 4) in file, (2, 5) in template") != std::string::npos);
  // Another depth: the lists differ in length, and the parameters are paired by name.
  const std::string deeper = error(adam_for(nn::MLP(3, 2, 4, 2, random::key(0))));
  CHECK(deeper.find("\n  stages[0].leaves[\"mu\"]: length 4 in file, 6 in template\n  "
                    "stages[0].mu.layers[1].weight: f32 (2, 4) in file, f32 (4, 4) in "
                    "template\n  stages[0].mu.layers[1].bias: f32 (2,) in file, f32 (4,) in "
                    "template\n  stages[0].mu.layers[2].weight: not in file, f32 (2, 4) in "
                    "template\n  stages[0].mu.layers[2].bias: not in file, f32 (2,) in "
                    "template\n") != std::string::npos);
  INFO(deeper);
  CHECK(deeper.find("gradient_structure: static value") != std::string::npos);
}
