// A minimal application built against an *installed* kiln through pkg-config: it
// proves the headers, the library and kiln.pc are installed and usable.
#include <kiln/kiln.hpp>

#include <iostream>

int main() {
  kiln::Array a = kiln::full({2, 2}, 1.5);
  kiln::Array b = kiln::arange(4.0, kiln::f32);
  kiln::Array c = kiln::sum(kiln::reshape(b, {2, 2}) + a);
  std::cout << c.item<float>() << "\n";  // (0+1+2+3) + 4*1.5 = 12
  return c.item<float>() == 12.0f ? 0 : 1;
}
