// Helpers shared by the kiln::nn layers: keys for initialisation (Equinox's
// splitting scheme) and the "[nn.X] expected input ..., got ..." errors.
// Installed only because the Sequential template uses key_at.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "kiln/runtime/array.hpp"

namespace kiln::nn::detail {

// Throws ValueError unless `key` is a PRNG key (u32, shape (2,)).
void check_key(std::string_view module, const Array& key);
// Row i of random::split(key, n) as a key of shape (2,).
Array key_at(const Array& keys, std::int64_t i);
// Equinox's default_init: uniform in [-lim, lim) of f32.
Array uniform_init(const Array& key, const Shape& shape, double lim);

// ShapeError "[<module>] expected input <expected>, got <shape>".
[[noreturn]] void throw_input_shape(std::string_view module, std::string_view what,
                                    std::string_view expected, const Shape& got);
// ValueError "[<module>] <what> is None" when `a` is null; DTypeError unless floating.
void check_floating_input(std::string_view module, std::string_view what, const Array& a);
// Checks that `a` (floating, see above) has the dtype of the layer's parameter
// `param` (skipped when None): "[nn.Linear] input is f16 but weight is f32", so a
// half-cast input or model names the layer rather than the inner op.
void check_param_dtype(std::string_view module, std::string_view what, const Array& a,
                       std::string_view param_name, const Array& param);
// Checks a floating `input` of shape (N, channels, ...) (at least 2 axes):
// "[<module>] input (3, 5) has 5 channels, expected 4".
void check_channels(std::string_view module, const Array& x, std::int64_t channels);
// Checks a floating `input` ending in `shape` and returns those trailing axes.
Axes trailing_axes(std::string_view module, const Array& x,
                   const std::vector<std::int64_t>& shape);
// Checks an attention `mask`: bool, and broadcasting to `target` (the logits'
// shape, laid out as `layout`, e.g. "(..., heads, Sq, Sk)"): "[<module>] mask
// (9, 9) does not broadcast to (2, 4, 8, 8) = (..., heads, Sq, Sk)". Checked
// here so the error names the layer, not the inner `where`.
void check_mask(std::string_view module, const Array& mask, const Shape& target,
                std::string_view layout);
// `v` of shape (C,) reshaped to (C, 1, ..., 1) to broadcast against (N, C, ...)
// of `ndim` axes.
Array per_channel(const Array& v, std::int64_t ndim);

}  // namespace kiln::nn::detail
