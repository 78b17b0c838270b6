// kiln: an embeddable C++20 tensor runtime with an array DSL. This umbrella header
// is what an application includes. It stays light: no xtensor (that is in
// <kiln/runtime/xtensor.hpp>), no backend internals.
#pragma once

#include "kiln/dsl/autodiff.hpp"
#include "kiln/dsl/control.hpp"
#include "kiln/dsl/jit.hpp"
#include "kiln/dsl/ops.hpp"
#include "kiln/dsl/random.hpp"
#include "kiln/dsl/vmap.hpp"
#include "kiln/modules/nn.hpp"
#include "kiln/optim/optim.hpp"
#include "kiln/runtime/array.hpp"
#include "kiln/runtime/checkpoint.hpp"
#include "kiln/runtime/device.hpp"
#include "kiln/runtime/dtype.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/shape.hpp"
#include "kiln/runtime/thread_pool.hpp"
#include "kiln/runtime/tree.hpp"
#include "kiln/runtime/weights.hpp"

// The backends register themselves when libkiln loads (backends/registry.cpp).
// Every program that includes kiln.hpp names that registration, so linking
// libkiln statically (-Ddefault_library=static) keeps it: nothing else refers
// to it.
extern "C" const bool kiln_backends_registered;
namespace kiln::detail {
[[gnu::used]] static const bool* const kLinkBackends = &kiln_backends_registered;
}  // namespace kiln::detail
