// An application built against an installed kiln-dist through pkg-config: it
// starts itself as two ranks (launch_local), each averages a tree, and the
// parent checks what rank 1 printed. Its headers must not pull in Gloo's.
#include <kiln/dist/dist.hpp>
#include <kiln/dist/launch.hpp>
#include <kiln/kiln.hpp>

#include <cstdlib>
#include <iostream>
#include <vector>

int main(int, char** argv) {
  using namespace kiln;
  if (std::getenv("KILN_RANK") != nullptr) {
    dist::Group group = dist::init();
    auto mean = group.all_reduce_mean(std::vector<Array>{full({3}, group.rank() + 1.0)});
    std::cout << "mean " << mean[0].to_vector<float>()[1] << "\n";  // (1 + 2) / 2
    return 0;
  }
  const auto result = dist::launch_local(2, {argv[0]});
  if (!result.ok() || result.ranks[1].output != "mean 1.5\n") {
    std::cerr << result.summary();
    return 1;
  }
  std::cout << "ok\n";
  return 0;
}
