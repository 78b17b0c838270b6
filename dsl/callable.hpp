// Holding a user's function inside a transform's result (grad, vmap,
// checkpoint, custom_vjp, jacobians): the result is callable through a const
// reference, whatever the function's own call operator is (a lambda with
// `mutable` state, or another transform's result).
#pragma once

#include <utility>

namespace kiln::detail {

template <class F>
struct Held {
  mutable F f;
  template <class... A>
  decltype(auto) operator()(A&&... a) const {
    return f(std::forward<A>(a)...);
  }
};
template <class F>
Held(F) -> Held<F>;

}  // namespace kiln::detail
