// Control: the accepted static leaves compile with the same flags, so a failure
// of the other snippets is the diagnostic they expect and not a broken setup.
// expect: compiles
#include <array>
#include <bitset>
#include <kiln/kiln.hpp>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

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
// Aggregates are checked field by field, nested ones too.
struct Inner {
  double eps = 1e-5;
  std::vector<int> dims;
  friend bool operator==(const Inner&, const Inner&) = default;
  template <class H>
  friend H AbslHashValue(H h, const Inner& c) {
    return H::combine(std::move(h), c.eps, c.dims);
  }
};
struct Outer {
  Inner inner;
  Mode mode = Mode::kEval;
  std::string name;
  friend bool operator==(const Outer&, const Outer&) = default;
  template <class H>
  friend H AbslHashValue(H h, const Outer& c) {
    return H::combine(std::move(h), c.inner, c.mode, c.name);
  }
};
// A class kiln cannot see into, declared a value.
class Declared {
 public:
  KILN_STATIC_VALUE(Declared);
  friend bool operator==(const Declared&, const Declared&) = default;
  template <class H>
  friend H AbslHashValue(H h, const Declared& d) {
    return H::combine(std::move(h), d.k_);
  }

 private:
  int k_ = 0;
};
auto captureless = [](const kiln::Array& x) { return x; };
auto generic_captureless = [](const auto& x) { return x; };
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
  Outer outer;
  Declared declared;
  kiln::Static<std::vector<double>> scales;
  kiln::Static<std::array<float, 3>> triple;
  kiln::Static<std::variant<int, std::string>> choice;
  std::map<int, double> by_id;
  std::set<std::string> tags;
  std::tuple<int, double, Mode> settings;
  std::bitset<8> bits;
  decltype(captureless) act2;
  decltype(generic_captureless) act3;
  KILN_MODULE(Ok, w, act, n, lr, flag, mode, name, config, wrapped, outer, declared, scales,
              triple, choice, by_id, tags, settings, bits, act2, act3);
};
}  // namespace

int use() {
  const Ok ok;
  const auto [leaves, def] = kiln::tree::flatten(ok);
  return kiln::tree::unflatten<Ok>(def, leaves).n;
}
