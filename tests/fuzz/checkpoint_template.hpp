// The template tree the checkpoint fuzz targets load into: every node kind a
// manifest records (struct, list, dict, array of each dtype, None, empty
// optional, statics), like tests/checkpoint/helpers.hpp's Model. The seed
// corpus (make_seeds.cpp) saves this tree.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kiln/runtime/array.hpp"
#include "kiln/runtime/buffer.hpp"
#include "kiln/runtime/tree.hpp"

namespace kiln::fuzz {

struct Linear {
  Array weight;
  Array bias;
  KILN_MODULE(Linear, weight, bias);
};

struct Model {
  std::vector<Linear> layers;
  std::map<std::string, Array> buffers;
  Array half;
  Array precise;
  std::optional<Linear> head;
  int depth = 2;
  std::string name = "mlp";
  KILN_MODULE(Model, layers, buffers, half, precise, head, depth, name);
};

inline Array blank(DType dtype, Shape shape) {
  const std::size_t n = static_cast<std::size_t>(shape_size(shape, size_of(dtype)).bytes);
  return Array(dtype, std::move(shape), HostBuffer::allocate(n, true));
}

// The structure, dtypes and shapes the seeds have (values all zero).
inline Model model_template() {
  Model m;
  m.layers = {{blank(DType::kF32, {2, 3}), Array()},
              {blank(DType::kF32, {3, 1}), blank(DType::kF32, {1})}};
  m.buffers["count"] = blank(DType::kI32, {});
  m.buffers["key"] = blank(DType::kU32, {2});
  m.buffers["mask"] = blank(DType::kBool, {3});
  m.half = blank(DType::kF16, {4});
  m.precise = blank(DType::kF64, {2});
  return m;
}

}  // namespace kiln::fuzz
