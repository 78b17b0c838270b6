// kiln::nn: neural-network layers, activations and losses written only in the
// public DSL (no backend knowledge), as typed pytrees. Include this, or
// <kiln/kiln.hpp>, which includes it.
#pragma once

#include "kiln/modules/activations.hpp"
#include "kiln/modules/attention.hpp"
#include "kiln/modules/conv.hpp"
#include "kiln/modules/functional.hpp"
#include "kiln/modules/layers.hpp"
#include "kiln/modules/losses.hpp"
#include "kiln/modules/norm.hpp"
#include "kiln/modules/recurrent.hpp"
#include "kiln/modules/sequential.hpp"
#include "kiln/modules/state.hpp"
#include "kiln/modules/transformer.hpp"
