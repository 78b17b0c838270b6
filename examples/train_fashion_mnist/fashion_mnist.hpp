// Fashion-MNIST from the IDX files Debian's dataset-fashion-mnist package installs
// (gzip, read with zlib), kept on the host as bytes; minibatches are gathered on the
// host and uploaded as f32 arrays normalised like the reference models do.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include <kiln/kiln.hpp>

namespace fmnist {

inline constexpr const char* kDefaultDir = "/usr/share/datasets/fashion-mnist";
inline constexpr std::int64_t kPixels = 28 * 28;
inline constexpr std::int64_t kClasses = 10;
// Mean and standard deviation of the training pixels scaled to [0, 1].
inline constexpr float kMean = 0.2860f;
inline constexpr float kStd = 0.3530f;

struct Split {
  std::vector<std::uint8_t> images;  // n * 784 pixels, row-major
  std::vector<std::uint8_t> labels;  // n labels in [0, 10)
  std::int64_t size() const { return static_cast<std::int64_t>(labels.size()); }
  // Keeps the first n examples (n <= 0 or n >= size(): all of them).
  void truncate(std::int64_t n);
};

struct Dataset {
  Split train, test;
};

// Reads {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz from `dir`. Throws
// kiln::ValueError naming the file and what is wrong with it: missing (with a
// hint to install the package or pass --data), not gzip/IDX, wrong dimensions,
// truncated, labels out of range, image and label counts that differ.
Dataset load(const std::filesystem::path& dir);

// One IDX file of unsigned bytes: its dimensions and contents.
struct Idx {
  std::vector<std::int64_t> dims;
  std::vector<std::uint8_t> data;
};
Idx read_idx(const std::filesystem::path& path);

// Examples `indices` of `split` as a normalised f32 (B, 784) array and i32 (B,)
// labels on the default device.
std::pair<kiln::Array, kiln::Array> gather(const Split& split,
                                           std::span<const std::int32_t> indices);
// Examples [begin, end) in order.
std::pair<kiln::Array, kiln::Array> slice(const Split& split, std::int64_t begin,
                                          std::int64_t end);

}  // namespace fmnist
