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

// Checks the sizes and the key, splits it in `num_keys` (as Equinox does) and
// fills weight_ih (gates * hidden, in) and weight_hh (gates * hidden, hidden)
// from keys 0 and 1; returns the keys for the biases. All uniform in
// +-1/sqrt(hidden) (*lim).
Array init_weights(const char* module, std::int64_t in, std::int64_t hidden, std::int64_t gates,
                   const Array& key, std::int64_t num_keys, Array& weight_ih, Array& weight_hh,
                   double* lim) {
  if (in < 1 || hidden < 1) {
    throw ValueError(str_cat("[", module, "] input_size and hidden_size must be >= 1, got ", in,
                             " and ", hidden));
  }
  detail::check_key(module, key);
  const Array keys = random::split(key, num_keys);
  *lim = std::sqrt(1.0 / static_cast<double>(hidden));
  weight_ih = detail::uniform_init(detail::key_at(keys, 0), Shape{gates * hidden, in}, *lim);
  weight_hh = detail::uniform_init(detail::key_at(keys, 1), Shape{gates * hidden, hidden}, *lim);
  return keys;
}

// Checks one step's arrays: `what` (..., size), with the batch axes of input.
void check_step(const char* module, const char* what, const Array& a, std::int64_t size,
                const Array& input) {
  detail::check_param_dtype(module, what, a, "input", input);
  Shape want(input.shape().begin(), input.shape().end() - 1);
  want.push_back(size);
  if (a.shape() != want) {
    detail::throw_input_shape(module, what, to_string(want), a.shape());
  }
}

void check_input(const char* module, const Array& input, std::int64_t input_size,
                 const Array& weight_ih) {
  detail::check_param_dtype(module, "input", input, "weight_ih", weight_ih);
  if (input.ndim() < 1 || input.shape().back() != input_size) {
    detail::throw_input_shape(module, "input", str_cat("(..., ", input_size, ")"), input.shape());
  }
}

// x @ w^T for x (..., in) and w (rows, in).
Array rows_times(const Array& x, const Array& w) { return matmul(x, transpose(w)); }

}  // namespace

GRUCell::GRUCell(std::int64_t in, std::int64_t hidden, const Array& key, bool use_bias)
    : input_size(in), hidden_size(hidden) {
  double lim = 0;
  const Array keys = init_weights("nn.GRUCell", in, hidden, 3, key, 4, weight_ih, weight_hh, &lim);
  if (use_bias) {
    bias = detail::uniform_init(detail::key_at(keys, 2), Shape{3 * hidden}, lim);
    bias_n = detail::uniform_init(detail::key_at(keys, 3), Shape{hidden}, lim);
  }
}

Array GRUCell::operator()(const Array& input, const Array& hidden) const {
  check_input("nn.GRUCell", input, input_size, weight_ih);
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
  double lim = 0;
  const Array keys = init_weights("nn.LSTMCell", in, hidden, 4, key, 3, weight_ih, weight_hh, &lim);
  if (use_bias) bias = detail::uniform_init(detail::key_at(keys, 2), Shape{4 * hidden}, lim);
}

std::pair<Array, Array> LSTMCell::operator()(const Array& input,
                                             const std::pair<Array, Array>& hidden) const {
  check_input("nn.LSTMCell", input, input_size, weight_ih);
  check_step("nn.LSTMCell", "h", hidden.first, hidden_size, input);
  check_step("nn.LSTMCell", "c", hidden.second, hidden_size, input);
  Array lin = rows_times(input, weight_ih) + rows_times(hidden.first, weight_hh);
  if (!bias.is_null()) lin = lin + bias;
  const std::vector<Array> g = split(lin, 4, -1);
  const Array c = sigmoid(g[1]) * hidden.second + sigmoid(g[0]) * tanh(g[2]);
  return {sigmoid(g[3]) * tanh(c), c};
}

}  // namespace kiln::nn
