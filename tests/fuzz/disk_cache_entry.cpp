// libFuzzer target: the Vulkan disk cache's file check (verify_entry) and the
// "spirv" payload decoder (backends/vulkan/disk_cache.cpp), no device needed.
// The first input byte picks a mode so that the fuzzer gets past the header:
//   bit 0: expect the provenance, kind and key the file's own header names
//          (else a fixed lavapipe-like provenance, "spirv", key 1);
//   bit 1: the bytes after the header become the payload of a well-formed
//          entry (a valid checksum over bad contents).
// An entry that verifies must decode to SPIR-V only as encode would write it.
#include <cstring>
#include <string_view>
#include <vector>

#include "fuzz.hpp"
#include "kiln/backends/vulkan/disk_cache.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
  using namespace kiln::vk;
  if (size == 0) return 0;
  const std::uint8_t mode = data[0];
  std::vector<std::uint8_t> file(data + 1, data + size);
  CacheProvenance p;
  p.vendor_id = 0x10005;
  std::string kind = "spirv";
  std::uint64_t key = 1;
  if ((mode & 1) != 0 && file.size() >= kDiskCacheHeaderSize) {
    std::memcpy(&p.vendor_id, file.data() + 12, 4);
    std::memcpy(&p.device_id, file.data() + 16, 4);
    std::memcpy(&p.driver_version, file.data() + 20, 4);
    std::memcpy(p.pipeline_cache_uuid.data(), file.data() + 24, 16);
    std::memcpy(&key, file.data() + 40, 8);
    kind.assign(reinterpret_cast<const char *>(file.data() + 56),
                strnlen(reinterpret_cast<const char *>(file.data() + 56), kMaxDiskCacheKind));
  }
  return kiln::fuzz::run([&] {
    if ((mode & 2) != 0 && file.size() >= kDiskCacheHeaderSize) {
      // The bytes after the header as the payload of a well-formed entry
      // (encode_entry throws ValueError for a kind that cannot name a file,
      // which load() never reads).
      file = encode_entry(p, kind, key, std::span(file).subspan(kDiskCacheHeaderSize));
      kiln::fuzz::require(verify_entry(file, p, kind, key).empty(), "encoded entries verify");
    }
    if (!verify_entry(file, p, kind, key).empty()) return;
    const auto payload = std::span<const std::uint8_t>(file).subspan(kDiskCacheHeaderSize);
    std::uint32_t n = 0;
    if (payload.size() >= 4) std::memcpy(&n, payload.data(), 4);
    const std::string_view text =
        payload.size() >= 4 && payload.size() - 4 >= n
            ? std::string_view(reinterpret_cast<const char *>(payload.data()) + 4, n)
            : std::string_view("kernel");
    if (const auto words = decode_spirv_payload(payload, text)) {
      kiln::fuzz::require(encode_spirv_payload(text, *words) ==
                              std::vector<std::uint8_t>(payload.begin(), payload.end()),
                          "decode/encode round trip");
    }
  });
}
