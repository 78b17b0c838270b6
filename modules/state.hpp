// Layer state that is not a parameter (BatchNorm's running statistics), in the
// spirit of Equinox's State/StateIndex. A stateful layer is built against an
// nn::State, which it extends with its initial arrays, and keeps only an
// nn::StateIndex (a static name) to find them again:
//
//   nn::State state;
//   nn::BatchNorm bn(16, state);               // adds BatchNorm_0.running_mean/var
//   auto [y, state2] = bn(x, state);           // training: batch statistics
//
// nn::State is a pytree: a sorted std::map from "<index>.<field>" to Array, so
// its paths read `entries["BatchNorm_0.running_mean"]`. Its keys, dtypes and
// shapes are fixed when the model is built; State::set refuses a value of
// another dtype or shape. A filter_jit step taking and returning the state
// therefore keys on the same structure every call and traces once, and the
// state saves and loads with save_checkpoint/load_checkpoint like a model.
// Index names come from a per-State counter ("BatchNorm_0", "BatchNorm_1", in
// construction order), so rebuilding the same model against a fresh State gives
// the same keys: that is what load_checkpoint needs as a template.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/runtime/array.hpp"
#include "kiln/runtime/tree.hpp"

namespace kiln::nn {

// Where a layer's entries live in an nn::State: the prefix of their keys.
// A static leaf of the layer (the jit key includes it; it never changes).
struct StateIndex {
  std::string name;
  KILN_MODULE(StateIndex, name);
};

struct State {
  std::map<std::string, Array> entries;  // "<index name>.<field>" -> array
  KILN_MODULE(State, entries);

  // Adds `fields` under a new index named `name`, or "<kind>_<n>" with the
  // first n not yet used when `name` is empty. ValueError if `name` is taken.
  StateIndex add(std::string_view kind, const std::vector<std::pair<std::string, Array>>& fields,
                 std::string_view name = {});
  // The array stored for `field` of `index`; `layer` names the caller in the
  // error when it is missing (a layer used with a State it was not built with).
  const Array& get(const StateIndex& index, std::string_view field,
                   std::string_view layer = "nn.State") const;
  // A copy with `field` of `index` replaced; the value must have the stored
  // dtype and shape (ShapeError otherwise), so the structure never changes.
  State set(const StateIndex& index, const std::vector<std::pair<std::string, Array>>& fields,
            std::string_view layer = "nn.State") const;
};

}  // namespace kiln::nn
