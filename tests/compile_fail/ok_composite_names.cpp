// expect: compiles
//
// Control for var_keepdims_as_ddof.cpp: an integer ddof and an explicit
// keepdims still compile, and under `using namespace kiln` namespace std stays
// usable next to kiln::std (which is then called qualified), as do
// random::split and kiln::split side by side.
#include <kiln/kiln.hpp>
#include <vector>

using namespace kiln;

std::vector<Array> use(const Array& x, const Array& key) {
  std::vector<Array> out = split(x, 2);
  out.push_back(var(x, 0, 1));
  out.push_back(var(x, 0, 0, true));
  out.push_back(kiln::std(x, {}, 1));
  out.push_back(random::split(key, 3));
  return out;
}
