// Convolution and pooling layers of kiln::nn (NCHW input, OIHW kernel, as
// Equinox). They accept a batch (N, C, H, W) or one image (C, H, W) (Conv1d:
// (N, C, L) or (C, L); Conv3d: (N, C, D, H, W) or (C, D, H, W)). Options use Equinox's defaults, including stride 1
// for the pools. Weights are initialised uniform in +-1/sqrt(fan_in), fan_in =
// in_channels / groups * kernel taps, ConvTranspose2d included (as Equinox).
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

struct Conv1dOptions {
  std::int64_t stride = 1;
  std::int64_t padding = 0;  // both ends
  std::int64_t dilation = 1;
  std::int64_t groups = 1;
  bool use_bias = true;
};

// eqx.nn.Conv1d over x (N, C, L): conv2d on (N, C, 1, L).
struct Conv1d {
  Array weight;  // (out_channels, in_channels / groups, K)
  Array bias;    // (out_channels, 1), or None
  std::int64_t in_channels = 0;
  std::int64_t out_channels = 0;
  std::int64_t kernel_size = 1;
  std::int64_t stride = 1;
  std::int64_t padding = 0;
  std::int64_t dilation = 1;
  std::int64_t groups = 1;
  KILN_MODULE(Conv1d, weight, bias, in_channels, out_channels, kernel_size, stride, padding,
              dilation, groups);

  Conv1d() = default;
  Conv1d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel_size,
         const Array& key, const Conv1dOptions& options = {});
  Array operator()(const Array& x) const;
};

struct Conv3dOptions {
  Int3 stride = 1;
  Padding3 padding = 0;
  Int3 dilation = 1;
  std::int64_t groups = 1;
  bool use_bias = true;
};

// eqx.nn.Conv3d over x (N, C, D, H, W) or (C, D, H, W) (see conv3d).
struct Conv3d {
  Array weight;  // (out_channels, in_channels / groups, KD, KH, KW)
  Array bias;    // (out_channels, 1, 1, 1), or None
  std::int64_t in_channels = 0;
  std::int64_t out_channels = 0;
  std::array<std::int64_t, 3> kernel_size{1, 1, 1};
  std::array<std::int64_t, 3> stride{1, 1, 1};
  std::array<std::array<std::int64_t, 2>, 3> padding{};
  std::array<std::int64_t, 3> dilation{1, 1, 1};
  std::int64_t groups = 1;
  KILN_MODULE(Conv3d, weight, bias, in_channels, out_channels, kernel_size, stride, padding,
              dilation, groups);

  Conv3d() = default;
  Conv3d(std::int64_t in_channels, std::int64_t out_channels, Int3 kernel_size,
         const Array& key, const Conv3dOptions& options = {});
  Array operator()(const Array& x) const;
};

struct ConvTranspose2dOptions {
  Int2 stride = 1;
  Padding2 padding = 0;
  Int2 output_padding = 0;
  Int2 dilation = 1;
  std::int64_t groups = 1;
  bool use_bias = true;
};

// eqx.nn.ConvTranspose2d (see conv_transpose2d): upsamples by `stride`;
// nn::ConvTranspose2d(8, 4, 3, key, {.stride = 2, .padding = 1,
// .output_padding = 1}) doubles H and W.
struct ConvTranspose2d {
  Array weight;  // (out_channels, in_channels / groups, KH, KW)
  Array bias;    // (out_channels, 1, 1), or None
  std::int64_t in_channels = 0;
  std::int64_t out_channels = 0;
  std::array<std::int64_t, 2> kernel_size{1, 1};
  std::array<std::int64_t, 2> stride{1, 1};
  std::array<std::array<std::int64_t, 2>, 2> padding{};
  std::array<std::int64_t, 2> output_padding{0, 0};
  std::array<std::int64_t, 2> dilation{1, 1};
  std::int64_t groups = 1;
  KILN_MODULE(ConvTranspose2d, weight, bias, in_channels, out_channels, kernel_size, stride,
              padding, output_padding, dilation, groups);

  ConvTranspose2d() = default;
  ConvTranspose2d(std::int64_t in_channels, std::int64_t out_channels, Int2 kernel_size,
                  const Array& key, const ConvTranspose2dOptions& options = {});
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

// eqx.nn.AdaptiveAvgPool2d: means over target_shape bins (adaptive_avg_pool2d).
struct AdaptiveAvgPool2d {
  std::array<std::int64_t, 2> target_shape{1, 1};
  KILN_MODULE(AdaptiveAvgPool2d, target_shape);

  AdaptiveAvgPool2d() = default;
  explicit AdaptiveAvgPool2d(Int2 target_shape);
  Array operator()(const Array& x) const;
};

}  // namespace kiln::nn
