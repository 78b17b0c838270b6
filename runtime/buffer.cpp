// Host buffers.
#include "kiln/runtime/buffer.hpp"

#include <cstdlib>
#include <cstring>
#include <new>

#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln {

std::shared_ptr<HostBuffer> HostBuffer::allocate(std::size_t nbytes,
                                                 bool zero) {
  constexpr std::size_t kAlign = 64;
  const std::size_t rounded = ((nbytes + kAlign - 1) / kAlign) * kAlign;
  void* p = rounded == 0 ? nullptr : std::aligned_alloc(kAlign, rounded);
  if (rounded != 0 && p == nullptr) {
    throw OutOfMemoryError(detail::str_cat(
        "[cpu] out of host memory allocating ", nbytes, " bytes"));
  }
  if (zero && p) std::memset(p, 0, rounded);
  return std::shared_ptr<HostBuffer>(new HostBuffer(p, nbytes));
}

HostBuffer::~HostBuffer() { std::free(data_); }

void HostBuffer::read(void* dst) const {
  if (nbytes_) std::memcpy(dst, data_, nbytes_);
}

}  // namespace kiln
