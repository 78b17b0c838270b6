// GRUCell/LSTMCell (an LSTM under scan in filter_jit against a loop of the
// eager cell), Conv1d/ConvTranspose2d/AdaptiveAvgPool2d, and the
// per-example and elementwise losses against Optax's formulas.
#include <doctest/doctest.h>

#include <kiln/kiln.hpp>

using namespace kiln;
