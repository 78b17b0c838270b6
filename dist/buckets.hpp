// Buckets: how dist packs a tree's leaves into flat host buffers for one
// collective each, and unpacks them into arrays again. Internal to libkiln_dist.
//
// A plan is a pure function of the leaves' dtypes and sizes and the bucket
// size, so every rank computes the same plan from trees of the same avals.
// Leaves go in order into the open bucket of their class (f32, f16, bf16 into
// f32 buckets, f64 into f64 buckets, anything into byte buckets for a
// broadcast); a leaf that does not fit is split across buckets, so no bucket
// exceeds the size and one large weight still pipelines.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kiln/runtime/array.hpp"

namespace kiln::dist::detail {

enum class BucketType : std::uint8_t { kF32, kF64, kBytes };
std::size_t element_size(BucketType t);

// Elements [offset, offset + count) of leaf `leaf` sit at element `at` of the
// bucket (elements of the bucket's type: bytes for kBytes).
struct Piece {
  std::size_t leaf = 0, offset = 0, count = 0, at = 0;
};

struct Bucket {
  BucketType type = BucketType::kF32;
  std::size_t elements = 0;
  std::vector<Piece> pieces;
  std::size_t nbytes() const { return elements * element_size(type); }
};

// For a mean: every leaf must be f16, bf16, f32 or f64 (the caller checked).
std::vector<Bucket> plan_reduce(std::span<const Array> leaves, std::size_t bucket_bytes);
// For a broadcast: the leaves' bytes, any dtype.
std::vector<Bucket> plan_bytes(std::span<const Array> leaves, std::size_t bucket_bytes);

// Copies pieces of leaves into buckets. A leaf on a device without host
// memory is read (Buffer::read, which waits for its device) once, when its
// first piece is staged, and the copy is dropped after its last piece.
class Stager {
 public:
  Stager(std::span<const Array> leaves, std::span<const Bucket> buckets);
  void stage(const Bucket& bucket, void* dst);

 private:
  const std::byte* host_bytes(std::size_t leaf);
  std::span<const Array> leaves_;
  std::vector<std::size_t> pieces_left_;
  std::vector<std::vector<std::byte>> copies_;
};

// Builds arrays shaped like `like` from buckets: each value divided by
// `divisor` (1 for a broadcast), rounded to the leaf's dtype, and the array
// put on the leaf's device once its last piece is in.
class Unstager {
 public:
  Unstager(std::span<const Array> like, std::span<const Bucket> buckets, int divisor);
  void unstage(const Bucket& bucket, const void* src);
  // The arrays, once every bucket is unstaged (empty leaves have no pieces:
  // they are made here).
  std::vector<Array> take();

 private:
  std::span<const Array> like_;
  int divisor_;
  std::vector<std::size_t> pieces_left_;
  std::vector<std::shared_ptr<HostBuffer>> host_;
  std::vector<Array> out_;
};

}  // namespace kiln::dist::detail
