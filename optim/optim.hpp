// kiln::optim: Optax-style optimizers written in the public DSL. Include this
// one header; see docs/MODELS.md ("Optimizers") for the design.
#pragma once

#include "kiln/optim/alias.hpp"
#include "kiln/optim/loss_scale.hpp"
#include "kiln/optim/schedule.hpp"
#include "kiln/optim/state.hpp"
#include "kiln/optim/transform.hpp"
