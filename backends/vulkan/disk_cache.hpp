// The Vulkan backend's on-disk cache: SPIR-V words and VkPipelineCache data
// kept between runs, so a warm start skips kernel generation and driver
// compilation. Host-only (no Vulkan headers): the backend fills CacheProvenance
// from VkPhysicalDeviceProperties.
//
// Layout: <dir>/<vendor>-<device>-<driver>-<uuid>/<kind>-<key>.bin (hex
// fields), so caches of different devices and drivers never overwrite each
// other. Each file is a fixed little-endian header, then the payload:
//
//   offset size
//        0    8  magic "KILNVKC\0"
//        8    4  kDiskCacheFormatVersion
//       12    4  vendor id       16 4 device id       20 4 driver version
//       24   16  pipelineCacheUUID
//       40    8  key
//       48    8  payload size in bytes
//       56   32  kind, zero padded
//       88    8  checksum: 64-bit hash of bytes [0, 88) and the payload
//       96       payload
//
// The header is verified on every load (a file copied from another machine or
// left by an older kiln is detected), and a file that fails is a miss with one
// warning; the caller's next store replaces it. Stores are atomic (unique temp
// file in the same directory, fsync, rename), so processes and threads sharing
// a cache directory only ever read complete files.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::vk {

// Bump on any change to the header or to how a kind's payload is encoded: files
// of another version are ignored (with a warning) and rewritten.
inline constexpr std::uint32_t kDiskCacheFormatVersion = 1;
inline constexpr std::size_t kDiskCacheHeaderSize = 96;
// Kinds name files, so they are short: [a-z0-9_-], 1 to kMaxDiskCacheKind
// chars.
inline constexpr std::size_t kMaxDiskCacheKind = 32;

// What a cached file is valid for: the fields of VkPhysicalDeviceProperties
// that change when a driver's compiled output may change.
struct CacheProvenance {
  std::uint32_t vendor_id = 0;
  std::uint32_t device_id = 0;
  std::uint32_t driver_version = 0;
  std::array<std::uint8_t, 16> pipeline_cache_uuid{};
  friend bool operator==(const CacheProvenance&,
                         const CacheProvenance&) = default;
};

// Why `file` (a cache file's bytes: header, then payload) is not the entry
// (provenance, kind, key); empty when it is, and then the payload is
// file.subspan(kDiskCacheHeaderSize). This is all DiskCache::load checks after
// reading the file; it needs no device and no file (tests/fuzz calls it).
std::string verify_entry(std::span<const std::uint8_t> file,
                         const CacheProvenance& provenance,
                         std::string_view kind, std::uint64_t key);
// The bytes of the file that holds `payload` as the entry (provenance, kind,
// key): what DiskCache::store writes. `kind` must be valid.
std::vector<std::uint8_t> encode_entry(const CacheProvenance& provenance,
                                       std::string_view kind, std::uint64_t key,
                                       std::span<const std::uint8_t> payload);

// The "spirv" kind's payload: u32 length of the kernel's text, the text, then
// its SPIR-V words (host byte order). decode returns the words only for a
// payload made from `text` whose words start with a SPIR-V header (magic
// number, 5 words); anything else is a miss.
std::vector<std::uint8_t> encode_spirv_payload(
    std::string_view text, std::span<const std::uint32_t> words);
std::optional<std::vector<std::uint32_t>> decode_spirv_payload(
    std::span<const std::uint8_t> payload, std::string_view text);

// Thread-safe; any number of DiskCache objects, in any number of processes, may
// share one directory.
class DiskCache {
 public:
  // $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln (when absolute, as the XDG spec
  // requires), else $HOME/.cache/kiln; nullopt when KILN_DISK_CACHE=0 or no
  // location can be determined.
  static std::optional<std::filesystem::path> default_dir();

  // Touches nothing on disk: directories are created by the first store.
  DiskCache(std::filesystem::path dir, CacheProvenance provenance);

  // The payload stored under (kind, key) for this provenance, or nullopt on a
  // miss. A missing file is a silent miss; an unreadable, foreign (other
  // provenance, kind, key or format version), truncated or corrupt file is a
  // miss that prints one warning per file to stderr, naming the file and the
  // reason. Throws ValueError only for an invalid kind (a programming error).
  std::optional<std::vector<std::uint8_t>> load(std::string_view kind,
                                                std::uint64_t key);

  // Writes the entry atomically, replacing any file there. IO failures
  // (read-only or missing directory, disk full) return false and never throw;
  // the first one is reported on stderr, later ones are not (a read-only cache
  // would otherwise warn once per kernel). Throws ValueError only for an
  // invalid kind.
  bool store(std::string_view kind, std::uint64_t key,
             std::span<const std::uint8_t> payload);

  // Where (kind, key) lives for this provenance (for tests and diagnostics).
  std::filesystem::path path_for(std::string_view kind,
                                 std::uint64_t key) const;
  // This provenance's subdirectory of the cache directory.
  const std::filesystem::path& directory() const { return device_dir_; }
  const CacheProvenance& provenance() const { return provenance_; }
  // Warnings printed so far by this object.
  std::size_t warnings() const;

 private:
  void warn_load(const std::filesystem::path& file, std::string_view reason);
  void warn_store(const std::filesystem::path& file, std::string_view reason);

  CacheProvenance provenance_;
  std::filesystem::path device_dir_;
  mutable std::mutex mu_;
  std::set<std::string> warned_files_;  // guarded by mu_
  bool warned_store_ = false;           // guarded by mu_
  std::size_t warnings_ = 0;            // guarded by mu_
};

}  // namespace kiln::vk
