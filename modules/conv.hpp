// Convolution and pooling layers of kiln::nn (NCHW input, OIHW kernel, as
// Equinox). They accept a batch (N, C, H, W) or one image (C, H, W). Options
// use Equinox's defaults, including stride 1 for the pools.
#pragma once

#include <array>
#include <cstdint>

#include "kiln/modules/functional.hpp"
#include "kiln/runtime/array.hpp"
#include "kiln/runtime/tree.hpp"

namespace kiln::nn {

struct Conv2dOptions {
  Int2 stride = 1;
  Padding2 padding = 0;
  Int2 dilation = 1;
  std::int64_t groups = 1;
  bool use_bias = true;
};

// nn::Conv2d(3, 16, 3, key, {.stride = 2, .padding = 1}).
struct Conv2d {
  Array weight;  // (out_channels, in_channels / groups, KH, KW)
  Array bias;    // (out_channels, 1, 1), or None
  std::int64_t in_channels = 0;
  std::int64_t out_channels = 0;
  std::array<std::int64_t, 2> kernel_size{1, 1};
  std::array<std::int64_t, 2> stride{1, 1};
  std::array<std::array<std::int64_t, 2>, 2> padding{};  // ((top, bottom), (left, right))
  std::array<std::int64_t, 2> dilation{1, 1};
  std::int64_t groups = 1;
  KILN_MODULE(Conv2d, weight, bias, in_channels, out_channels, kernel_size, stride,
              padding, dilation, groups);

  Conv2d() = default;
  Conv2d(std::int64_t in_channels, std::int64_t out_channels, Int2 kernel_size,
         const Array& key, const Conv2dOptions& options = {});
  Array operator()(const Array& x) const;
};

struct MaxPool2d {
  std::array<std::int64_t, 2> kernel_size{1, 1};
  std::array<std::int64_t, 2> stride{1, 1};
  std::array<std::array<std::int64_t, 2>, 2> padding{};
  KILN_MODULE(MaxPool2d, kernel_size, stride, padding);

  MaxPool2d() = default;
  explicit MaxPool2d(Int2 kernel_size, const PoolOptions& options = {});
  Array operator()(const Array& x) const;
};

// Divides by KH * KW: padded zeros count (as Equinox).
struct AvgPool2d {
  std::array<std::int64_t, 2> kernel_size{1, 1};
  std::array<std::int64_t, 2> stride{1, 1};
  std::array<std::array<std::int64_t, 2>, 2> padding{};
  KILN_MODULE(AvgPool2d, kernel_size, stride, padding);

  AvgPool2d() = default;
  explicit AvgPool2d(Int2 kernel_size, const PoolOptions& options = {});
  Array operator()(const Array& x) const;
};

}  // namespace kiln::nn
