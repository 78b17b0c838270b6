// first-error: deleted function
// expect: kiln::var(const Array&, AxisArg, B) [with B = bool]
//
// var(x, axes, true) would convert true to ddof = 1 and silently divide by
// N - 1; a deleted overload for a bool third argument refuses it. Pass
// var(x, axes, 0, true) for keepdims.
#include <kiln/kiln.hpp>

kiln::Array use(const kiln::Array& x) { return kiln::var(x, 0, true); }
