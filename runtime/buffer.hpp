// Buffer: the storage behind an array, owned by a device. The runtime knows host
// memory (HostBuffer); device backends derive their own buffers from Buffer.
#pragma once

#include <cstddef>
#include <memory>

#include "kiln/runtime/device.hpp"

namespace kiln {

class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual Device device() const = 0;
  virtual std::size_t nbytes() const = 0;
  // Host-addressable bytes, or nullptr when the buffer lives elsewhere.
  virtual void* host_data() { return nullptr; }
  // Copies nbytes() bytes to `dst` (waits for pending device work).
  virtual void read(void* dst) const = 0;
};

// Frees the host buffer cache's blocks (freed arrays kept by exact size for
// reuse) and returns free heap pages to the system (glibc malloc_trim). Called
// when a jit cache evicts or clears entries; an application may call it too.
void trim_host_memory();

// 64-byte aligned host memory (for SIMD), zero-initialised only on request.
class HostBuffer final : public Buffer {
 public:
  static std::shared_ptr<HostBuffer> allocate(std::size_t nbytes,
                                              bool zero = false);
  ~HostBuffer() override;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  Device device() const override { return Device::cpu(); }
  std::size_t nbytes() const override { return nbytes_; }
  void* host_data() override { return data_; }
  void read(void* dst) const override;

 private:
  HostBuffer(void* data, std::size_t nbytes) : data_(data), nbytes_(nbytes) {}
  void* data_;
  std::size_t nbytes_;
};

// Freed host blocks are kept for reuse by size (runtime/buffer.cpp says why), up
// to 1 GiB; KILN_HOST_CACHE=0 disables this. These report and empty that cache.
std::size_t host_cache_bytes();
void clear_host_cache();

}  // namespace kiln
