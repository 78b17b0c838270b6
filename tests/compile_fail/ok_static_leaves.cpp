// Control: the accepted static leaves compile with the same flags, so a failure
// of the other snippets is the diagnostic they expect and not a broken setup.
// expect: compiles
#include <kiln/kiln.hpp>
#include <string>

namespace {
kiln::Array relu(const kiln::Array& x) { return x; }
struct Config {
  int width = 0;
  friend bool operator==(const Config&, const Config&) = default;
  template <class H>
  friend H AbslHashValue(H h, const Config& c) {
    return H::combine(std::move(h), c.width);
  }
};
enum class Mode { kTrain, kEval };
struct Ok {
  kiln::Array w;
  kiln::Array (*act)(const kiln::Array&) = &relu;
  int n = 0;
  float lr = 0.1f;
  bool flag = false;
  Mode mode = Mode::kTrain;
  std::string name;
  Config config;
  kiln::Static<Config> wrapped;
  KILN_MODULE(Ok, w, act, n, lr, flag, mode, name, config, wrapped);
};
}  // namespace

int use() {
  const Ok ok;
  const auto [leaves, def] = kiln::tree::flatten(ok);
  return kiln::tree::unflatten<Ok>(def, leaves).n;
}
