// The geometry of the CPU's unfold and fold kernels (window.cpp), shared with
// the implicit-GEMM kernels (implicit_gemm.cpp), which build a convolution's
// columns, or fold them back, one product's part at a time. Internal to the
// CPU backend.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/dsl/params.hpp"

namespace kiln::cpu {

// An unfold's output (..., T, L) is a sequence of units, one per (image, tap)
// pair (unit u: tap u % T of image u / T), each a row of L positions; fold
// adds every image's T x L block back into that image.
struct WindowPlan {
  std::int64_t image = 1;      // elements of one image
  std::int64_t taps = 1;       // T
  std::int64_t positions = 1;  // L
  std::int64_t width = 1;      // output positions along the last axis
  std::int64_t rows = 1;       // L / width
  std::int64_t stride = 1;     // along the last axis
  // Per tap: positions [lo, hi) of every row read the image; the others are
  // padding.
  std::vector<std::int64_t> lo, hi;
  // start[t * rows + q]: the image element position lo of row q reads, or -1
  // when the row is all padding.
  std::vector<std::int64_t> start;
};

WindowPlan window_plan(const WindowParams& p);

// Units [u0, u1) of the unfold of `src` (all of the input) into `dst`
// ((u1 - u0) * positions elements), `pad` in the padding. T is any element
// type up to 8 bytes (window.cpp instantiates float, double and 16-bit words).
template <class T>
void unfold_units(const WindowPlan& pl, const T* src, std::int64_t u0, std::int64_t u1, T pad,
                  T* dst);

// Images [v0, v1) of the fold into `dst` (all of the output): zeroed, then
// `cols` (their (v1 - v0) * taps * positions elements) added in, tap after tap
// in tap order, as fold does.
template <class T>
void fold_images(const WindowPlan& pl, const T* cols, std::int64_t v0, std::int64_t v1, T* dst);

}  // namespace kiln::cpu
