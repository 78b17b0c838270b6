// GRUCell and LSTMCell (see recurrent.hpp): two matmuls per step, the gates
// taken apart with split along the feature axis.
#include "kiln/modules/recurrent.hpp"

#include <cmath>
#include <vector>

#include "kiln/dsl/ops.hpp"
#include "kiln/dsl/random.hpp"
#include "kiln/modules/util.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::nn {
namespace {

using kiln::detail::str_cat;

void check_sizes(const char* module, std::int64_t in, std::int64_t hidden) {
  if (in < 1 || hidden < 1) {
    throw ValueError(str_cat("[", module, "] input_size and hidden_size must be >= 1, got ", in,
                             " and ", hidden));
  }
}

// Checks one step's arrays: `what` (..., size), with the batch axes of input.
void check_step(const char* module, const char* what, const Array& a, std::int64_t size,
                const Array& input) {
  detail::check_floating_input(module, what, a);
  Shape want(input.shape().begin(), input.shape().end() - 1);
  want.push_back(size);
  if (a.shape() != want) {
    detail::throw_input_shape(module, what, to_string(want), a.shape());
  }
}

void check_input(const char* module, const Array& input, std::int64_t input_size) {
  detail::check_floating_input(module, "input", input);
  if (input.ndim() < 1 || input.shape().back() != input_size) {
    detail::throw_input_shape(module, "input", str_cat("(..., ", input_size, ")"),
                              input.shape());
  }
}

// x @ w^T for x (..., in) and w (rows, in).
Array rows_times(const Array& x, const Array& w) { return matmul(x, transpose(w)); }

}  // namespace

GRUCell::GRUCell(std::int64_t in, std::int64_t hidden, const Array& key, bool use_bias)
    : input_size(in), hidden_size(hidden) {
  check_sizes("nn.GRUCell", in, hidden);
  detail::check_key("nn.GRUCell", key);
  const Array keys = random::split(key, 4);
  const double lim = std::sqrt(1.0 / static_cast<double>(hidden));
  weight_ih = detail::uniform_init(detail::key_at(keys, 0), Shape{3 * hidden, in}, lim);
  weight_hh = detail::uniform_init(detail::key_at(keys, 1), Shape{3 * hidden, hidden}, lim);
  if (use_bias) {
    bias = detail::uniform_init(detail::key_at(keys, 2), Shape{3 * hidden}, lim);
    bias_n = detail::uniform_init(detail::key_at(keys, 3), Shape{hidden}, lim);
  }
}

Array GRUCell::operator()(const Array& input, const Array& hidden) const {
  check_input("nn.GRUCell", input, input_size);
  check_step("nn.GRUCell", "hidden", hidden, hidden_size, input);
  Array xi = rows_times(input, weight_ih);
  if (!bias.is_null()) xi = xi + bias;
  const std::vector<Array> ig = split(xi, 3, -1);
  const std::vector<Array> hg = split(rows_times(hidden, weight_hh), 3, -1);
  const Array reset = sigmoid(ig[0] + hg[0]);
  const Array update = sigmoid(ig[1] + hg[1]);
  const Array hn = bias_n.is_null() ? hg[2] : hg[2] + bias_n;
  const Array candidate = tanh(ig[2] + reset * hn);
  return candidate + update * (hidden - candidate);
}

LSTMCell::LSTMCell(std::int64_t in, std::int64_t hidden, const Array& key, bool use_bias)
    : input_size(in), hidden_size(hidden) {
  check_sizes("nn.LSTMCell", in, hidden);
  detail::check_key("nn.LSTMCell", key);
  const Array keys = random::split(key, 3);
  const double lim = std::sqrt(1.0 / static_cast<double>(hidden));
  weight_ih = detail::uniform_init(detail::key_at(keys, 0), Shape{4 * hidden, in}, lim);
  weight_hh = detail::uniform_init(detail::key_at(keys, 1), Shape{4 * hidden, hidden}, lim);
  if (use_bias) bias = detail::uniform_init(detail::key_at(keys, 2), Shape{4 * hidden}, lim);
}

std::pair<Array, Array> LSTMCell::operator()(const Array& input,
                                             const std::pair<Array, Array>& hidden) const {
  check_input("nn.LSTMCell", input, input_size);
  check_step("nn.LSTMCell", "h", hidden.first, hidden_size, input);
  check_step("nn.LSTMCell", "c", hidden.second, hidden_size, input);
  Array lin = rows_times(input, weight_ih) + rows_times(hidden.first, weight_hh);
  if (!bias.is_null()) lin = lin + bias;
  const std::vector<Array> g = split(lin, 4, -1);
  const Array c = sigmoid(g[1]) * hidden.second + sigmoid(g[0]) * tanh(g[2]);
  return {sigmoid(g[3]) * tanh(c), c};
}

}  // namespace kiln::nn
