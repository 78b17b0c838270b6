// Recurrent cells of kiln::nn: GRUCell and LSTMCell with Equinox's parameter
// layouts, gate order and initialisation (uniform in +-1/sqrt(hidden_size),
// keys split as Equinox splits them). One call is one time step on a batch:
// input (..., input_size), hidden (..., hidden_size). Run a sequence with
// kiln::scan, the cell as the body:
//
//   auto [last, hs] = scan([&](const auto& hc, const Array& x) {
//     auto next = cell(x, hc);
//     return std::pair{next, next.first};
//   }, std::pair{h0, c0}, xs);                  // xs (T, B, input_size)
#pragma once

#include <cstdint>
#include <utility>

#include "kiln/runtime/array.hpp"
#include "kiln/runtime/tree.hpp"

namespace kiln::nn {

// eqx.nn.GRUCell: gates (reset, update, new) stacked in that order along the
// rows; bias_n is added to the hidden part of the candidate inside the reset:
//   r = sigmoid(W_ir x + b_r + W_hr h), z = sigmoid(W_iz x + b_z + W_hz h)
//   n = tanh(W_in x + b_n + r * (W_hn h + bias_n)),  h' = n + z * (h - n).
struct GRUCell {
  Array weight_ih;  // (3 * hidden_size, input_size)
  Array weight_hh;  // (3 * hidden_size, hidden_size)
  Array bias;       // (3 * hidden_size,), or None
  Array bias_n;     // (hidden_size,), or None
  std::int64_t input_size = 0;
  std::int64_t hidden_size = 0;
  KILN_MODULE(GRUCell, weight_ih, weight_hh, bias, bias_n, input_size, hidden_size);

  GRUCell() = default;
  GRUCell(std::int64_t input_size, std::int64_t hidden_size, const Array& key,
          bool use_bias = true);
  Array operator()(const Array& input, const Array& hidden) const;
};

// eqx.nn.LSTMCell: gates (input, forget, cell, output) stacked along the rows:
//   i, f, g, o = split(W_ih x + W_hh h + bias, 4)
//   c' = sigmoid(f) c + sigmoid(i) tanh(g),  h' = sigmoid(o) tanh(c').
// hidden and the result are (h, c).
struct LSTMCell {
  Array weight_ih;  // (4 * hidden_size, input_size)
  Array weight_hh;  // (4 * hidden_size, hidden_size)
  Array bias;       // (4 * hidden_size,), or None
  std::int64_t input_size = 0;
  std::int64_t hidden_size = 0;
  KILN_MODULE(LSTMCell, weight_ih, weight_hh, bias, input_size, hidden_size);

  LSTMCell() = default;
  LSTMCell(std::int64_t input_size, std::int64_t hidden_size, const Array& key,
           bool use_bias = true);
  std::pair<Array, Array> operator()(const Array& input,
                                     const std::pair<Array, Array>& hidden) const;
};

}  // namespace kiln::nn
