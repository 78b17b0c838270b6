// Errors of kiln::dist (data parallel across processes). They derive from
// kiln::Error like every kiln error; they live here, not in runtime/error.hpp,
// because dist is an optional library (libkiln_dist, built on Gloo).
#pragma once

#include "kiln/runtime/error.hpp"

namespace kiln {

// A collective across processes failed: a peer died or closed its connection,
// or the ranks disagreed on the operation or the tree. The message starts with
// the operation ("[dist.all_reduce_mean]") and names this rank and the world
// size. After a peer failure the group cannot be used any more (every later
// call throws at once, repeating the first failure).
class DistError : public Error {
 public:
  using Error::Error;
};

// A peer did not join, or did not take part in a collective, within the
// group's timeout (dist::Options::timeout, KILN_DIST_TIMEOUT).
class DistTimeoutError : public DistError {
 public:
  using DistError::DistError;
};

}  // namespace kiln
