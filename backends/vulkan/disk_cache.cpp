// The Vulkan backend's on-disk cache (layout and guarantees in disk_cache.hpp).
// POSIX file calls rather than iostreams: atomicity needs O_EXCL, fsync and
// rename, and errno gives the warnings their reason.
#include "kiln/backends/vulkan/disk_cache.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <system_error>

#include "kiln/runtime/env.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::vk {
namespace {

namespace fs = std::filesystem;

constexpr std::array<std::uint8_t, 8> kMagic = {'K', 'I', 'L', 'N',
                                                'V', 'K', 'C', '\0'};
constexpr std::size_t kVersionOffset = 8;
constexpr std::size_t kVendorOffset = 12;
constexpr std::size_t kDeviceOffset = 16;
constexpr std::size_t kDriverOffset = 20;
constexpr std::size_t kUuidOffset = 24;
constexpr std::size_t kKeyOffset = 40;
constexpr std::size_t kSizeOffset = 48;
constexpr std::size_t kKindOffset = 56;
constexpr std::size_t kChecksumOffset = kKindOffset + kMaxDiskCacheKind;
static_assert(kChecksumOffset + 8 == kDiskCacheHeaderSize);

using Header = std::array<std::uint8_t, kDiskCacheHeaderSize>;

// MurmurHash64A: a word at a time, and every step is a bijection of the running
// state, so any change confined to one 8-byte word always changes the result.
std::uint64_t hash64(std::span<const std::uint8_t> data, std::uint64_t seed) {
  constexpr std::uint64_t m = 0xc6a4a7935bd1e995ULL;
  constexpr int r = 47;
  std::uint64_t h = seed ^ (data.size() * m);
  const std::size_t words = data.size() / 8;
  for (std::size_t i = 0; i < words; ++i) {
    std::uint64_t k;
    // Host byte order: a cache never moves between hosts of different
    // endianness without its provenance changing too.
    std::memcpy(&k, data.data() + 8 * i, 8);
    k *= m;
    k ^= k >> r;
    k *= m;
    h ^= k;
    h *= m;
  }
  const std::size_t tail = data.size() % 8;
  if (tail != 0) {
    std::uint64_t k = 0;
    for (std::size_t i = 0; i < tail; ++i) {
      k |= std::uint64_t{data[8 * words + i]} << (8 * i);
    }
    h ^= k;
    h *= m;
  }
  h ^= h >> r;
  h *= m;
  h ^= h >> r;
  return h;
}

std::uint64_t checksum(std::span<const std::uint8_t> header,
                       std::span<const std::uint8_t> payload) {
  return hash64(payload, hash64(header.first(kChecksumOffset), 0));
}

template <class T>
void put(Header& h, std::size_t offset, T value) {
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    h[offset + i] = static_cast<std::uint8_t>(value >> (8 * i));
  }
}

template <class T>
T get(std::span<const std::uint8_t> h, std::size_t offset) {
  T value = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    value |= static_cast<T>(static_cast<T>(h[offset + i]) << (8 * i));
  }
  return value;
}

std::string hex(std::uint64_t value, int digits) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%0*llx", digits,
                static_cast<unsigned long long>(value));
  return buf;
}

std::string uuid_hex(std::span<const std::uint8_t> uuid) {
  std::string out;
  for (std::uint8_t b : uuid) out += hex(b, 2);
  return out;
}

std::string describe(const CacheProvenance& p) {
  return detail::str_cat("vendor 0x", hex(p.vendor_id, 4), " device 0x",
                         hex(p.device_id, 4), " driver 0x",
                         hex(p.driver_version, 8), " uuid ",
                         uuid_hex(p.pipeline_cache_uuid));
}

void check_kind(std::string_view kind) {
  bool ok = !kind.empty() && kind.size() <= kMaxDiskCacheKind;
  for (char c : kind) {
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
                c == '_');
  }
  if (!ok) {
    throw ValueError(detail::str_cat(
        "[disk_cache] kind '", kind, "' must be 1 to ", kMaxDiskCacheKind,
        " characters from [a-z0-9_-] (it names files)"));
  }
}

std::string errno_text(int err) {
  return std::error_code(err, std::generic_category()).message();
}

Header make_header(const CacheProvenance& p, std::string_view kind,
                   std::uint64_t key, std::span<const std::uint8_t> payload) {
  Header h{};
  std::copy(kMagic.begin(), kMagic.end(), h.begin());
  put<std::uint32_t>(h, kVersionOffset, kDiskCacheFormatVersion);
  put<std::uint32_t>(h, kVendorOffset, p.vendor_id);
  put<std::uint32_t>(h, kDeviceOffset, p.device_id);
  put<std::uint32_t>(h, kDriverOffset, p.driver_version);
  std::copy(p.pipeline_cache_uuid.begin(), p.pipeline_cache_uuid.end(),
            h.begin() + kUuidOffset);
  put<std::uint64_t>(h, kKeyOffset, key);
  put<std::uint64_t>(h, kSizeOffset, payload.size());
  std::copy(kind.begin(), kind.end(), h.begin() + kKindOffset);
  put<std::uint64_t>(h, kChecksumOffset, checksum(h, payload));
  return h;
}

}  // namespace

// Version before anything else: a future version may lay the header out
// differently, so none of its other fields can be trusted.
std::string verify_entry(std::span<const std::uint8_t> file,
                         const CacheProvenance& p, std::string_view kind,
                         std::uint64_t key) {
  if (file.empty()) return "empty file (truncated)";
  if (file.size() < kDiskCacheHeaderSize) {
    return detail::str_cat("truncated: ", file.size(),
                           " bytes, shorter than the ", kDiskCacheHeaderSize,
                           "-byte header");
  }
  if (!std::equal(kMagic.begin(), kMagic.end(), file.begin())) {
    return "not a kiln cache file (bad magic)";
  }
  const auto version = get<std::uint32_t>(file, kVersionOffset);
  if (version != kDiskCacheFormatVersion) {
    return detail::str_cat("format version ", version, ", this kiln reads ",
                           kDiskCacheFormatVersion);
  }
  CacheProvenance written;
  written.vendor_id = get<std::uint32_t>(file, kVendorOffset);
  written.device_id = get<std::uint32_t>(file, kDeviceOffset);
  written.driver_version = get<std::uint32_t>(file, kDriverOffset);
  std::copy_n(file.begin() + kUuidOffset, 16,
              written.pipeline_cache_uuid.begin());
  if (written != p) {
    return detail::str_cat("written for another device or driver (",
                           describe(written), "), this is ", describe(p));
  }
  const std::string_view written_kind(
      reinterpret_cast<const char*>(file.data() + kKindOffset),
      strnlen(reinterpret_cast<const char*>(file.data() + kKindOffset),
              kMaxDiskCacheKind));
  const auto written_key = get<std::uint64_t>(file, kKeyOffset);
  if (written_kind != kind || written_key != key) {
    return detail::str_cat("holds ", written_kind, " key 0x",
                           hex(written_key, 16), ", expected ", kind, " key 0x",
                           hex(key, 16));
  }
  const auto size = get<std::uint64_t>(file, kSizeOffset);
  const std::uint64_t have = file.size() - kDiskCacheHeaderSize;
  if (have < size) {
    return detail::str_cat("truncated: the header promises ", size,
                           " payload bytes, the file has ", have);
  }
  if (have > size) {
    return detail::str_cat(have - size, " unexpected bytes after the ", size,
                           "-byte payload");
  }
  if (get<std::uint64_t>(file, kChecksumOffset) !=
      checksum(file.first(kDiskCacheHeaderSize),
               file.subspan(kDiskCacheHeaderSize))) {
    return "checksum mismatch (corrupt header or payload)";
  }
  return {};
}

std::vector<std::uint8_t> encode_entry(const CacheProvenance& provenance,
                                       std::string_view kind, std::uint64_t key,
                                       std::span<const std::uint8_t> payload) {
  check_kind(kind);
  const Header h = make_header(provenance, kind, key, payload);
  // Sized once and filled by memcpy (GCC 12 warns, wrongly, about
  // vector::insert after a range constructor here).
  std::vector<std::uint8_t> out(h.size() + payload.size());
  std::memcpy(out.data(), h.data(), h.size());
  if (!payload.empty()) {
    std::memcpy(out.data() + h.size(), payload.data(), payload.size());
  }
  return out;
}

std::vector<std::uint8_t> encode_spirv_payload(
    std::string_view text, std::span<const std::uint32_t> words) {
  std::vector<std::uint8_t> payload(4 + text.size() + words.size() * 4);
  const auto n = static_cast<std::uint32_t>(text.size());
  std::memcpy(payload.data(), &n, 4);
  std::memcpy(payload.data() + 4, text.data(), text.size());
  if (!words.empty()) {
    std::memcpy(payload.data() + 4 + text.size(), words.data(), words.size() * 4);
  }
  return payload;
}

std::optional<std::vector<std::uint32_t>> decode_spirv_payload(
    std::span<const std::uint8_t> payload, std::string_view text) {
  constexpr std::uint32_t kSpirvMagic = 0x07230203;
  constexpr std::size_t kSpirvHeaderWords = 5;
  std::uint32_t n = 0;
  if (payload.size() < 4) return std::nullopt;
  std::memcpy(&n, payload.data(), 4);
  // Every size from the file is checked against what is there before use.
  if (n != text.size() || payload.size() - 4 < n) return std::nullopt;
  const std::span<const std::uint8_t> rest = payload.subspan(4 + n);
  if (std::string_view(reinterpret_cast<const char*>(payload.data()) + 4, n) != text ||
      rest.size() % 4 != 0 || rest.size() < 4 * kSpirvHeaderWords) {
    return std::nullopt;
  }
  std::vector<std::uint32_t> words(rest.size() / 4);
  std::memcpy(words.data(), rest.data(), rest.size());
  if (words[0] != kSpirvMagic) return std::nullopt;
  return words;
}

namespace {

// Kernels and pipeline data are kilobytes to a few MiB; a file past this is
// not an entry kiln wrote.
constexpr std::uint64_t kMaxEntryBytes = std::uint64_t{256} << 20;

// Reads all of `path`. nullopt for a missing file (reason left empty, a silent
// miss) or with `reason` set for any other failure.
std::optional<std::vector<std::uint8_t>> read_file(const fs::path& path,
                                                   std::string& reason) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    // ENOTDIR: part of the path is a file. Either way nothing is stored here,
    // and store() reports why it cannot write.
    if (errno != ENOENT && errno != ENOTDIR) {
      reason = "cannot open: " + errno_text(errno);
    }
    return std::nullopt;
  }
  std::optional<std::vector<std::uint8_t>> out;
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    reason = "cannot stat: " + errno_text(errno);
  } else if (!S_ISREG(st.st_mode)) {
    reason = "not a regular file";
  } else if (static_cast<std::uint64_t>(st.st_size) > kMaxEntryBytes) {
    // A sparse or foreign file: refused by its size, before allocating it.
    reason = detail::str_cat("its size (", st.st_size, " bytes) is larger than any entry (at most ",
                             kMaxEntryBytes, ")");
  } else {
    // Writers never modify a file once it has its name (they rename a new one
    // over it), so the size read here stays true for this descriptor.
    std::vector<std::uint8_t> bytes(static_cast<std::size_t>(st.st_size));
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        reason = "cannot read: " + errno_text(errno);
        break;
      }
      if (n == 0) break;
      done += static_cast<std::size_t>(n);
    }
    bytes.resize(done);
    if (reason.empty()) out = std::move(bytes);
  }
  ::close(fd);
  return out;
}

bool write_all(int fd, std::span<const std::uint8_t> data,
               std::string& reason) {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      reason = "cannot write: " + errno_text(n < 0 ? errno : EIO);
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  return true;
}

// Writes header + payload to `path` through a temp file of its own in the same
// directory (same filesystem, so rename is atomic). The name carries the pid
// and a random suffix, and O_EXCL makes a clash (a forked child reusing a
// parent's state) a retry rather than two writers sharing one file. Empty on
// success.
std::string write_atomically(const fs::path& path, const Header& header,
                             std::span<const std::uint8_t> payload) {
  std::random_device rd;
  std::string tmp;
  int fd = -1;
  bool created_dirs = false;
  for (int attempt = 0; attempt < 8 && fd < 0; ++attempt) {
    const std::uint64_t suffix = (std::uint64_t{rd()} << 32) | rd();
    tmp = detail::str_cat(path.string(), ".tmp-", ::getpid(), "-",
                          hex(suffix, 16));
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) break;
    const int err = errno;
    if ((err == ENOENT || err == ENOTDIR) && !created_dirs) {
      // Another process may be creating the same directories: success is "it
      // is a directory now", whoever made it.
      created_dirs = true;
      std::error_code ec;
      fs::create_directories(path.parent_path(), ec);
      if (ec && !fs::is_directory(path.parent_path())) {
        return detail::str_cat("cannot create directory ",
                               path.parent_path().string(), ": ", ec.message());
      }
      continue;
    }
    if (err != EEXIST) {
      return detail::str_cat("cannot create ", tmp, ": ", errno_text(err));
    }
  }
  if (fd < 0) return detail::str_cat("cannot create a unique temp file ", tmp);

  std::string reason;
  bool ok = write_all(fd, header, reason) && write_all(fd, payload, reason);
  // fsync before rename: after a crash the name holds the old file or the whole
  // new one, never a new name over unwritten blocks. (The directory is not
  // fsynced: losing the rename itself only costs a recompile.)
  if (ok && ::fsync(fd) != 0) {
    reason = "cannot fsync: " + errno_text(errno);
    ok = false;
  }
  if (::close(fd) != 0 && ok) {  // NFS reports write errors here
    reason = "cannot close: " + errno_text(errno);
    ok = false;
  }
  if (ok && ::rename(tmp.c_str(), path.c_str()) != 0) {
    reason = detail::str_cat("cannot rename ", tmp, ": ", errno_text(errno));
    ok = false;
  }
  if (!ok) ::unlink(tmp.c_str());
  return reason;
}

}  // namespace

std::optional<fs::path> DiskCache::default_dir() {
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v ? std::string(v) : std::string();
  };
  if (!detail::env::flag("KILN_DISK_CACHE").value_or(true)) return std::nullopt;
  if (const auto dir = detail::env::text("KILN_CACHE_DIR")) return fs::path(*dir);
  if (const fs::path xdg = env("XDG_CACHE_HOME"); xdg.is_absolute()) {
    return xdg / "kiln";
  }
  if (const std::string home = env("HOME"); !home.empty()) {
    return fs::path(home) / ".cache" / "kiln";
  }
  return std::nullopt;
}

DiskCache::DiskCache(fs::path dir, CacheProvenance provenance)
    : provenance_(provenance),
      device_dir_(std::move(dir) /
                  detail::str_cat(hex(provenance.vendor_id, 8), "-",
                                  hex(provenance.device_id, 8), "-",
                                  hex(provenance.driver_version, 8), "-",
                                  uuid_hex(provenance.pipeline_cache_uuid))) {}

fs::path DiskCache::path_for(std::string_view kind, std::uint64_t key) const {
  check_kind(kind);
  return device_dir_ / detail::str_cat(kind, "-", hex(key, 16), ".bin");
}

std::optional<std::vector<std::uint8_t>> DiskCache::load(std::string_view kind,
                                                         std::uint64_t key) {
  const fs::path path = path_for(kind, key);
  std::string reason;
  auto bytes = read_file(path, reason);
  if (!bytes) {
    if (!reason.empty()) warn_load(path, reason);
    return std::nullopt;
  }
  reason = verify_entry(*bytes, provenance_, kind, key);
  if (!reason.empty()) {
    warn_load(path, reason);
    return std::nullopt;
  }
  bytes->erase(bytes->begin(), bytes->begin() + kDiskCacheHeaderSize);
  return bytes;
}

bool DiskCache::store(std::string_view kind, std::uint64_t key,
                      std::span<const std::uint8_t> payload) {
  const fs::path path = path_for(kind, key);
  const std::string reason = write_atomically(
      path, make_header(provenance_, kind, key, payload), payload);
  if (!reason.empty()) {
    warn_store(path, reason);
    return false;
  }
  // A file rewritten after a bad load is a new file: if it goes bad again, say
  // so.
  std::lock_guard lock(mu_);
  warned_files_.erase(path.string());
  return true;
}

std::size_t DiskCache::warnings() const {
  std::lock_guard lock(mu_);
  return warnings_;
}

void DiskCache::warn_load(const fs::path& file, std::string_view reason) {
  std::lock_guard lock(mu_);
  if (!warned_files_.insert(file.string()).second) return;
  ++warnings_;
  const std::string line =
      detail::str_cat("kiln: warning: [disk_cache] ignoring ", file.string(),
                      ": ", reason, " (the next store rewrites it)\n");
  std::fwrite(line.data(), 1, line.size(), stderr);
}

void DiskCache::warn_store(const fs::path& file, std::string_view reason) {
  std::lock_guard lock(mu_);
  if (warned_store_) return;
  warned_store_ = true;
  ++warnings_;
  const std::string line = detail::str_cat(
      "kiln: warning: [disk_cache] cannot store ", file.string(), ": ", reason,
      " (kernels will be compiled again next run; further store failures are "
      "not reported)\n");
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace kiln::vk
