// nn::Sequential: layers of different types applied in order, held as a
// std::tuple so the whole model stays one typed pytree (kiln's trees have a
// tuple node kind; grad returns a Sequential of the same type). A layer is any
// pytree callable as layer(x), or layer(x, key) when it wants randomness
// (Dropout); a plain activation function pointer is a layer too.
//
//   nn::Sequential net(nn::Conv2d(1, 8, 3, k1), nn::relu, nn::MaxPool2d(2, {.stride = 2}),
//                      nn::Lambda{nn::gelu}, nn::Dropout(0.1));
//   Array y = net(x, key);   // key split across the layers, as Equinox
#pragma once

#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

#include "kiln/dsl/random.hpp"
#include "kiln/modules/activations.hpp"
#include "kiln/modules/util.hpp"
#include "kiln/runtime/tree.hpp"

namespace kiln::nn {

// An activation as a layer; use it for overloaded functions (nn::gelu), which
// cannot be deduced as a bare Sequential element: nn::Lambda{nn::gelu}.
struct Lambda {
  Activation fn = identity;
  KILN_MODULE(Lambda, fn);
  Array operator()(const Array& x) const { return fn(x); }
};

template <class... Layers>
struct Sequential {
  std::tuple<Layers...> layers;
  KILN_MODULE(Sequential, layers);

  Sequential() = default;
  explicit Sequential(Layers... ls) requires(sizeof...(Layers) > 0)
      : layers(std::move(ls)...) {}

  // `key` (optional) is split into one key per layer (jax.random.split);
  // layers that take no key ignore theirs.
  Array operator()(const Array& x, const Array& key = Array()) const {
    const Array keys = key.is_null() ? Array() : random::split(key, sizeof...(Layers));
    Array h = x;
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((h = apply(std::get<I>(layers), h, keys, I)), ...);
    }(std::index_sequence_for<Layers...>());
    return h;
  }

 private:
  template <class L>
  static Array apply(const L& layer, const Array& x, const Array& keys, std::size_t i) {
    if constexpr (std::is_invocable_r_v<Array, const L&, const Array&, const Array&>) {
      return layer(x, keys.is_null() ? Array() : detail::key_at(keys, static_cast<std::int64_t>(i)));
    } else {
      static_assert(std::is_invocable_r_v<Array, const L&, const Array&>,
                    "kiln::nn::Sequential: every layer must be callable as layer(x) or "
                    "layer(x, key) and return an Array");
      return layer(x);
    }
  }
};

template <class... Layers>
Sequential(Layers...) -> Sequential<Layers...>;

}  // namespace kiln::nn
