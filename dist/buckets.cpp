// Bucket plans and host staging for kiln::dist (see buckets.hpp).
#include "kiln/dist/buckets.hpp"

#include <gloo/types.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>

#include "kiln/dsl/ops.hpp"
#include "kiln/runtime/half.hpp"

namespace kiln::dist::detail {
namespace {

std::optional<BucketType> reduce_type(DType d) {
  switch (d) {
    case DType::kF16:
    case DType::kBF16:
    case DType::kF32:
      return BucketType::kF32;
    case DType::kF64:
      return BucketType::kF64;
    default:
      return std::nullopt;
  }
}

// Leaf elements in units of the bucket type.
std::size_t units(const Array& a, BucketType t) {
  return t == BucketType::kBytes ? a.nbytes() : static_cast<std::size_t>(a.size());
}

template <class TypeOf>
std::vector<Bucket> plan(std::span<const Array> leaves, std::size_t bucket_bytes, TypeOf type_of) {
  std::vector<Bucket> buckets;
  std::array<std::optional<std::size_t>, 3> open{};  // per BucketType
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    const BucketType t = type_of(leaves[i].dtype());
    const std::size_t cap = std::max<std::size_t>(1, bucket_bytes / element_size(t));
    const std::size_t n = units(leaves[i], t);
    std::size_t done = 0;
    while (done < n) {
      auto& slot = open[static_cast<std::size_t>(t)];
      if (!slot || buckets[*slot].elements == cap) {
        slot = buckets.size();
        buckets.push_back(Bucket{t, 0, {}});
      }
      Bucket& b = buckets[*slot];
      const std::size_t take = std::min(n - done, cap - b.elements);
      b.pieces.push_back(Piece{i, done, take, b.elements});
      b.elements += take;
      done += take;
    }
  }
  return buckets;
}

std::vector<std::size_t> count_pieces(std::size_t n, std::span<const Bucket> buckets) {
  std::vector<std::size_t> count(n, 0);
  for (const Bucket& b : buckets)
    for (const Piece& p : b.pieces) ++count[p.leaf];
  return count;
}

float half_to_float(std::uint16_t bits) {
  gloo::float16 h;
  h.x = bits;
  return gloo::cpu_half2float(h);
}
std::uint16_t float_to_half(float f) { return gloo::cpu_float2half_rn(f).x; }

}  // namespace

std::size_t element_size(BucketType t) {
  switch (t) {
    case BucketType::kF32:
      return 4;
    case BucketType::kF64:
      return 8;
    case BucketType::kBytes:
      return 1;
  }
  return 1;
}

std::vector<Bucket> plan_reduce(std::span<const Array> leaves, std::size_t bucket_bytes) {
  return plan(leaves, bucket_bytes, [](DType d) { return *reduce_type(d); });
}

std::vector<Bucket> plan_bytes(std::span<const Array> leaves, std::size_t bucket_bytes) {
  return plan(leaves, bucket_bytes, [](DType) { return BucketType::kBytes; });
}

Stager::Stager(std::span<const Array> leaves, std::span<const Bucket> buckets)
    : leaves_(leaves), pieces_left_(count_pieces(leaves.size(), buckets)), copies_(leaves.size()) {}

const std::byte* Stager::host_bytes(std::size_t leaf) {
  const Array& a = leaves_[leaf];
  if (void* p = a.buffer()->host_data()) return static_cast<const std::byte*>(p);
  if (copies_[leaf].empty()) {
    copies_[leaf].resize(a.nbytes());
    a.buffer()->read(copies_[leaf].data());
  }
  return copies_[leaf].data();
}

void Stager::stage(const Bucket& bucket, void* dst) {
  const std::size_t es = element_size(bucket.type);
  for (const Piece& p : bucket.pieces) {
    const Array& a = leaves_[p.leaf];
    const std::byte* src = host_bytes(p.leaf);
    std::byte* out = static_cast<std::byte*>(dst) + p.at * es;
    if (bucket.type == BucketType::kBytes || size_of(a.dtype()) == es) {
      std::memcpy(out, src + p.offset * es, p.count * es);
    } else if (a.dtype() == DType::kBF16) {  // bf16 leaf in an f32 bucket
      const auto* h = reinterpret_cast<const std::uint16_t*>(src) + p.offset;
      auto* f = reinterpret_cast<float*>(out);
      for (std::size_t i = 0; i < p.count; ++i) f[i] = kiln::bf16_to_float(h[i]);
    } else {  // f16 leaf in an f32 bucket
      const auto* h = reinterpret_cast<const std::uint16_t*>(src) + p.offset;
      auto* f = reinterpret_cast<float*>(out);
      for (std::size_t i = 0; i < p.count; ++i) f[i] = half_to_float(h[i]);
    }
    if (--pieces_left_[p.leaf] == 0) std::vector<std::byte>().swap(copies_[p.leaf]);
  }
}

Unstager::Unstager(std::span<const Array> like, std::span<const Bucket> buckets, int divisor)
    : like_(like),
      divisor_(divisor),
      pieces_left_(count_pieces(like.size(), buckets)),
      host_(like.size()),
      out_(like.size()) {}

void Unstager::unstage(const Bucket& bucket, const void* src) {
  const std::size_t es = element_size(bucket.type);
  for (const Piece& p : bucket.pieces) {
    const Array& like = like_[p.leaf];
    auto& host = host_[p.leaf];
    if (!host) host = HostBuffer::allocate(like.nbytes());
    const std::byte* in = static_cast<const std::byte*>(src) + p.at * es;
    std::byte* base = static_cast<std::byte*>(host->host_data());
    if (bucket.type == BucketType::kBytes) {
      std::memcpy(base + p.offset, in, p.count);
    } else if (bucket.type == BucketType::kF64) {
      const auto* s = reinterpret_cast<const double*>(in);
      auto* d = reinterpret_cast<double*>(base) + p.offset;
      const double w = divisor_;
      for (std::size_t i = 0; i < p.count; ++i) d[i] = s[i] / w;
    } else if (like.dtype() == DType::kF32) {
      const auto* s = reinterpret_cast<const float*>(in);
      auto* d = reinterpret_cast<float*>(base) + p.offset;
      const float w = static_cast<float>(divisor_);
      for (std::size_t i = 0; i < p.count; ++i) d[i] = s[i] / w;
    } else if (like.dtype() == DType::kBF16) {  // bf16 leaf, summed in f32
      const auto* s = reinterpret_cast<const float*>(in);
      auto* d = reinterpret_cast<std::uint16_t*>(base) + p.offset;
      const float w = static_cast<float>(divisor_);
      for (std::size_t i = 0; i < p.count; ++i) d[i] = kiln::float_to_bf16(s[i] / w);
    } else {  // f16 leaf, summed in f32
      const auto* s = reinterpret_cast<const float*>(in);
      auto* d = reinterpret_cast<std::uint16_t*>(base) + p.offset;
      const float w = static_cast<float>(divisor_);
      for (std::size_t i = 0; i < p.count; ++i) d[i] = float_to_half(s[i] / w);
    }
    if (--pieces_left_[p.leaf] == 0) {
      Array a(like.dtype(), like.shape(), std::move(host));
      out_[p.leaf] = like.device() == Device::cpu() ? a : to_device(a, like.device());
    }
  }
}

std::vector<Array> Unstager::take() {
  for (std::size_t i = 0; i < out_.size(); ++i) {
    if (!out_[i].is_null()) continue;
    const Array& like = like_[i];
    Array a(like.dtype(), like.shape(), HostBuffer::allocate(like.nbytes()));
    out_[i] = like.device() == Device::cpu() ? a : to_device(a, like.device());
  }
  return std::move(out_);
}

}  // namespace kiln::dist::detail
