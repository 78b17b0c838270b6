// The .npy header (numpy's format 1.0/2.0/3.0): writing it for kiln's dtypes
// (and for the bytes of a checkpoint's manifest) and parsing it strictly from
// untrusted bytes. Internal to checkpoints: not
// installed.
//
// Why not xtensor's xnpy.hpp: it has no f16 element type (numpy's '<f2'), loads
// only into an xt::xarray of a compile-time element type, and is not written
// for untrusted input (the 1.0 header length is read through signed chars,
// short reads of the data go unnoticed, shape entries are parsed without checks
// and the element count is allocated unbounded), while a corrupt checkpoint
// must give a clear error, never a crash or a huge allocation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "kiln/runtime/dtype.hpp"
#include "kiln/runtime/shape.hpp"

namespace kiln::detail::npy {

// Bytes to read before the header's total length is known (magic, version and
// the length field of a 2.0/3.0 header; every .npy is longer than this).
inline constexpr std::size_t kPreludeBytes = 12;
// Headers longer than this are refused (numpy itself refuses over 10000).
inline constexpr std::size_t kMaxHeaderBytes = 65536;

// numpy's dtype.str for a kiln dtype: "<f4", "|b1", "<f2", ...
std::string_view descr(DType d);

// The whole header (magic through the '\n' that ends the padded dict) of a
// C-order array, version 1.0, padded so that the data starts 64-byte aligned.
std::string make_header(DType dtype, const Shape& shape);

// numpy's uint8: the dtype of a byte string stored as a 1-d array (a
// checkpoint's manifest), which numpy.load reads without pickle.
inline constexpr std::string_view kBytesDescr = "|u1";
// make_header for a 1-d |u1 array of n bytes.
std::string make_bytes_header(std::size_t n);

// Total header length (the data's offset) from the first kPreludeBytes bytes.
// Throws CheckpointError "<context>: ..." on a bad magic or version.
std::size_t header_size(std::string_view prelude, std::string_view context);

struct Header {
  DType dtype = DType::kF32;
  Shape shape;
};
// Parses a whole header (as long as header_size said). Accepts what numpy
// writes for kiln's dtypes; refuses big-endian and Fortran-order data, other
// dtypes, negative or overflowing dimensions, with CheckpointError.
Header parse_header(std::string_view header, std::string_view context);
// The same, but a dtype kiln does not have (numpy's '<i8', '|u1', ...) gives
// nullopt instead of the error (read_npz's skip_unsupported_dtypes).
std::optional<Header> parse_header_if_known(std::string_view header, std::string_view context);
// Parses a whole header that must describe a 1-d |u1 array (the same checks,
// with CheckpointError); returns its length in bytes.
std::uint64_t parse_bytes_header(std::string_view header,
                                 std::string_view context);

}  // namespace kiln::detail::npy
