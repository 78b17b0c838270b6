// The Vulkan backend's on-disk cache (backends/vulkan/disk_cache.hpp): hits
// across restarts, provenance, every kind of bad file (one warning, then
// rewritten), location from the environment, IO failures, and concurrent
// processes and threads sharing one directory. Each test works in a fresh temp
// directory.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <kiln/backends/vulkan/disk_cache.hpp>
#include <kiln/runtime/error.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace fs = std::filesystem;
using kiln::vk::CacheProvenance;
using kiln::vk::DiskCache;
using kiln::vk::kDiskCacheFormatVersion;
using kiln::vk::kDiskCacheHeaderSize;

namespace disk_cache_test {

class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (fs::temp_directory_path() / "kiln-disk-cache-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Redirects fd 2 to a file while alive, so tests can read the warnings.
class StderrCapture {
 public:
  StderrCapture() : file_(fs::temp_directory_path() / "kiln-stderr-XXXXXX") {
    std::string pattern = file_.string();
    const int fd = ::mkstemp(pattern.data());
    REQUIRE(fd >= 0);
    file_ = pattern;
    std::fflush(stderr);
    saved_ = ::dup(2);
    ::dup2(fd, 2);
    ::close(fd);
  }
  ~StderrCapture() {
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
    fs::remove(file_);
  }
  std::string text() const {
    std::fflush(stderr);
    std::ifstream in(file_, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

 private:
  fs::path file_;
  int saved_ = -1;
};

// Sets (or unsets, for nullopt) an environment variable; restores it on exit.
class EnvGuard {
 public:
  EnvGuard(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    set(value);
  }
  ~EnvGuard() { set(old_); }

 private:
  void set(const std::optional<std::string>& value) {
    if (value) {
      ::setenv(name_, value->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  const char* name_;
  std::optional<std::string> old_;
};

CacheProvenance lavapipe() {
  CacheProvenance p;
  p.vendor_id = 0x10005;
  p.device_id = 0;
  p.driver_version = 0x5c00004;
  for (int i = 0; i < 16; ++i) {
    p.pipeline_cache_uuid[i] = static_cast<std::uint8_t>(0xa0 + i);
  }
  return p;
}

// lavapipe() with one field changed, for each field.
std::vector<std::pair<std::string, CacheProvenance>> other_provenances() {
  std::vector<std::pair<std::string, CacheProvenance>> out;
  CacheProvenance p = lavapipe();
  p.vendor_id = 0x10de;
  out.emplace_back("vendor", p);
  p = lavapipe();
  p.device_id = 1;
  out.emplace_back("device", p);
  p = lavapipe();
  p.driver_version += 1;
  out.emplace_back("driver", p);
  p = lavapipe();
  p.pipeline_cache_uuid[15] ^= 1;
  out.emplace_back("uuid", p);
  return out;
}

std::vector<std::uint8_t> bytes(std::size_t n, std::uint8_t seed) {
  std::vector<std::uint8_t> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    out[i] = static_cast<std::uint8_t>(seed + 31 * i + (i >> 8));
  }
  return out;
}

std::vector<std::uint8_t> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<std::uint8_t>(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const fs::path& path, const std::vector<std::uint8_t>& data) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data.data()),
            static_cast<std::streamsize>(data.size()));
}

// Every file under `dir` (recursively), as paths relative to it, sorted and
// joined with ", " (a string, so a failed check prints it).
std::string files_under(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_directory()) out.push_back(fs::relative(e.path(), dir).string());
  }
  std::sort(out.begin(), out.end());
  std::string joined;
  for (const auto& f : out) joined += (joined.empty() ? "" : ", ") + f;
  return joined;
}

std::size_t count_lines(const std::string& s) {
  return static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n'));
}

std::uint64_t splitmix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A payload that describes itself: 8-byte tag, 8-byte size, then bytes derived
// from the tag. Sizes differ per (writer, iteration), up to 256 KiB, so a torn
// or mixed file cannot pass check_tagged.
std::vector<std::uint8_t> tagged_payload(std::uint32_t writer,
                                         std::uint32_t iteration) {
  const std::uint64_t tag = (std::uint64_t{writer} << 32) | iteration;
  const std::size_t n = 16 + splitmix(tag) % (256 * 1024);
  std::vector<std::uint8_t> out(n);
  std::memcpy(out.data(), &tag, 8);
  const std::uint64_t size = n;
  std::memcpy(out.data() + 8, &size, 8);
  for (std::size_t i = 16; i < n; ++i) {
    out[i] =
        static_cast<std::uint8_t>(splitmix(tag ^ (i / 8)) >> (8 * (i % 8)));
  }
  return out;
}

bool check_tagged(const std::vector<std::uint8_t>& payload) {
  if (payload.size() < 16) return false;
  std::uint64_t tag = 0;
  std::memcpy(&tag, payload.data(), 8);
  return payload == tagged_payload(static_cast<std::uint32_t>(tag >> 32),
                                   static_cast<std::uint32_t>(tag));
}

}  // namespace disk_cache_test

using namespace disk_cache_test;

TEST_CASE("a stored entry is a hit for a new DiskCache on the same directory") {
  TempDir tmp;
  const auto spirv = bytes(1000, 1);
  const auto pipeline = bytes(77, 2);
  {
    DiskCache cache(tmp.path(), lavapipe());
    CHECK(cache.store("spirv", 1, spirv));
    CHECK(cache.store("pipeline", 1, pipeline));  // same key, other kind
    CHECK(cache.store("spirv", 2, {}));
    CHECK(cache.warnings() == 0);
  }
  DiskCache restarted(tmp.path(), lavapipe());
  CHECK(restarted.load("spirv", 1) == spirv);
  CHECK(restarted.load("pipeline", 1) == pipeline);
  const auto empty = restarted.load("spirv", 2);
  REQUIRE(empty.has_value());  // an empty payload is a hit, not a miss
  CHECK(empty->empty());
  CHECK_FALSE(restarted.load("spirv", 3).has_value());  // never stored
  CHECK(restarted.warnings() == 0);

  CHECK(restarted.path_for("spirv", 0xabc) ==
        tmp.path() /
            "00010005-00000000-05c00004-a0a1a2a3a4a5a6a7a8a9aaabacadaeaf" /
            "spirv-0000000000000abc.bin");
  CHECK(files_under(tmp.path()) ==
        "00010005-00000000-05c00004-a0a1a2a3a4a5a6a7a8a9aaabacadaeaf/"
        "pipeline-0000000000000001.bin, "
        "00010005-00000000-05c00004-a0a1a2a3a4a5a6a7a8a9aaabacadaeaf/"
        "spirv-0000000000000001.bin, "
        "00010005-00000000-05c00004-a0a1a2a3a4a5a6a7a8a9aaabacadaeaf/"
        "spirv-0000000000000002.bin");
  CHECK(fs::file_size(restarted.path_for("spirv", 1)) ==
        kDiskCacheHeaderSize + spirv.size());
}

TEST_CASE(
    "another vendor, device, driver version or pipelineCacheUUID misses") {
  TempDir tmp;
  DiskCache cache(tmp.path(), lavapipe());
  REQUIRE(cache.store("spirv", 7, bytes(100, 3)));
  for (const auto& [field, other] : other_provenances()) {
    CAPTURE(field);
    DiskCache foreign(tmp.path(), other);
    CHECK(foreign.directory() != cache.directory());
    CHECK_FALSE(foreign.load("spirv", 7).has_value());
    CHECK(foreign.warnings() == 0);  // another directory: a plain miss
  }
  CHECK(cache.load("spirv", 7) == bytes(100, 3));
}

TEST_CASE("a file copied from another device is detected by its header") {
  for (const auto& [field, other] : other_provenances()) {
    CAPTURE(field);
    TempDir tmp;
    DiskCache source(tmp.path(), lavapipe());
    REQUIRE(source.store("spirv", 7, bytes(100, 3)));
    DiskCache cache(tmp.path(), other);
    const fs::path path = cache.path_for("spirv", 7);
    write_bytes(path, read_bytes(source.path_for("spirv", 7)));

    StderrCapture err;
    CHECK_FALSE(cache.load("spirv", 7).has_value());
    CHECK_FALSE(cache.load("spirv", 7).has_value());
    CHECK(cache.warnings() == 1);
    const std::string text = err.text();
    CHECK(count_lines(text) == 1);
    CHECK(text.find(path.string()) != std::string::npos);
    CHECK(text.find("written for another device or driver (vendor 0x10005 "
                    "device 0x0000 driver 0x05c00004") != std::string::npos);

    CHECK(cache.store("spirv", 7, bytes(50, 4)));
    CHECK(cache.load("spirv", 7) == bytes(50, 4));
    CHECK(cache.warnings() == 1);
  }
}

TEST_CASE(
    "a bad file is a miss with one warning naming the reason, then rewritten") {
  struct Damage {
    std::string name;
    std::string reason;  // expected in the warning
    std::vector<std::uint8_t> (*apply)(std::vector<std::uint8_t>);
  };
  // Applied to a valid file holding 1000 payload bytes.
  const std::vector<Damage> damages = {
      {"payload byte flipped (first)", "checksum mismatch",
       [](std::vector<std::uint8_t> f) {
         f[kDiskCacheHeaderSize] ^= 0x01;
         return f;
       }},
      {"payload byte flipped (middle)", "checksum mismatch",
       [](std::vector<std::uint8_t> f) {
         f[kDiskCacheHeaderSize + 500] ^= 0x80;
         return f;
       }},
      {"payload byte flipped (last)", "checksum mismatch",
       [](std::vector<std::uint8_t> f) {
         f.back() ^= 0x10;
         return f;
       }},
      {"kind padding byte changed", "checksum mismatch",
       [](std::vector<std::uint8_t> f) {
         f[56 + 20] = 1;  // past "spirv" and its terminator
         return f;
       }},
      {"truncated to 1 byte",
       "truncated: 1 bytes, shorter than the 96-byte header",
       [](std::vector<std::uint8_t> f) {
         f.resize(1);
         return f;
       }},
      {"truncated inside the header", "truncated: 50 bytes",
       [](std::vector<std::uint8_t> f) {
         f.resize(50);
         return f;
       }},
      {"truncated one byte short of the header", "truncated: 95 bytes",
       [](std::vector<std::uint8_t> f) {
         f.resize(kDiskCacheHeaderSize - 1);
         return f;
       }},
      {"truncated to the header",
       "truncated: the header promises 1000 payload "
       "bytes, the file has 0",
       [](std::vector<std::uint8_t> f) {
         f.resize(kDiskCacheHeaderSize);
         return f;
       }},
      {"truncated mid-payload", "the file has 500",
       [](std::vector<std::uint8_t> f) {
         f.resize(kDiskCacheHeaderSize + 500);
         return f;
       }},
      {"truncated by one byte", "the file has 999",
       [](std::vector<std::uint8_t> f) {
         f.pop_back();
         return f;
       }},
      {"bytes appended", "3 unexpected bytes after the 1000-byte payload",
       [](std::vector<std::uint8_t> f) {
         f.insert(f.end(), {1, 2, 3});
         return f;
       }},
      {"zero-length file", "empty file",
       [](std::vector<std::uint8_t>) { return std::vector<std::uint8_t>(); }},
      {"garbage", "not a kiln cache file (bad magic)",
       [](std::vector<std::uint8_t> f) {
         for (std::size_t i = 0; i < f.size(); ++i) {
           f[i] = static_cast<std::uint8_t>(i * 7 + 3);
         }
         return f;
       }},
      {"future format version",
       "format version " + std::to_string(kDiskCacheFormatVersion + 1) +
           ", this kiln reads " + std::to_string(kDiskCacheFormatVersion),
       [](std::vector<std::uint8_t> f) {
         f[8] = static_cast<std::uint8_t>(kDiskCacheFormatVersion + 1);
         return f;
       }},
      {"another key's file under this name",
       "holds spirv key 0x0000000000000043, expected spirv key "
       "0x0000000000000042",
       [](std::vector<std::uint8_t> f) {
         f[40] = 0x43;  // the key field
         return f;
       }},
  };

  const auto payload = bytes(1000, 9);
  for (const Damage& d : damages) {
    CAPTURE(d.name);
    TempDir tmp;
    {
      DiskCache writer(tmp.path(), lavapipe());
      REQUIRE(writer.store("spirv", 0x42, payload));
    }
    DiskCache cache(tmp.path(), lavapipe());
    const fs::path path = cache.path_for("spirv", 0x42);
    write_bytes(path, d.apply(read_bytes(path)));

    StderrCapture err;
    CHECK_FALSE(cache.load("spirv", 0x42).has_value());
    CHECK_FALSE(cache.load("spirv", 0x42).has_value());  // no second warning
    CHECK(cache.warnings() == 1);
    const std::string text = err.text();
    CHECK(count_lines(text) == 1);
    CHECK(text.find("kiln: warning: [disk_cache] ignoring " + path.string() +
                    ": ") == 0);
    CHECK(text.find(d.reason) != std::string::npos);
    CAPTURE(text);

    CHECK(cache.store("spirv", 0x42, payload));
    CHECK(cache.load("spirv", 0x42) == payload);
    CHECK(DiskCache(tmp.path(), lavapipe()).load("spirv", 0x42) == payload);
    CHECK(cache.warnings() == 1);
    CHECK(count_lines(err.text()) == 1);
  }
}

TEST_CASE(
    "the cache directory: KILN_CACHE_DIR, XDG_CACHE_HOME, HOME; "
    "KILN_DISK_CACHE=0 disables") {
  EnvGuard flag("KILN_DISK_CACHE", std::nullopt);
  EnvGuard dir("KILN_CACHE_DIR", "/tmp/kiln-explicit");
  EnvGuard xdg("XDG_CACHE_HOME", "/tmp/xdg");
  EnvGuard home("HOME", "/home/someone");
  CHECK(DiskCache::default_dir() == fs::path("/tmp/kiln-explicit"));
  {
    EnvGuard enabled("KILN_DISK_CACHE", "1");
    CHECK(DiskCache::default_dir() == fs::path("/tmp/kiln-explicit"));
  }
  {
    EnvGuard disabled("KILN_DISK_CACHE", "0");
    CHECK_FALSE(DiskCache::default_dir().has_value());
  }
  EnvGuard no_dir("KILN_CACHE_DIR", "");  // empty counts as unset
  CHECK(DiskCache::default_dir() == fs::path("/tmp/xdg/kiln"));
  {
    EnvGuard relative("XDG_CACHE_HOME", "relative/cache");  // XDG: ignore it
    CHECK(DiskCache::default_dir() == fs::path("/home/someone/.cache/kiln"));
  }
  EnvGuard no_xdg("XDG_CACHE_HOME", std::nullopt);
  CHECK(DiskCache::default_dir() == fs::path("/home/someone/.cache/kiln"));
  EnvGuard no_home("HOME", std::nullopt);
  CHECK_FALSE(DiskCache::default_dir().has_value());
}

TEST_CASE(
    "a store that cannot create its directory returns false and warns once") {
  TempDir tmp;
  const fs::path blocker = tmp.path() / "not-a-dir";
  write_bytes(blocker,
              {1, 2, 3});  // a file where the cache directory should be
  DiskCache cache(blocker, lavapipe());
  StderrCapture err;
  bool first = true;
  bool second = true;
  CHECK_NOTHROW(first = cache.store("spirv", 1, bytes(10, 1)));
  CHECK_NOTHROW(second = cache.store("spirv", 2, bytes(10, 1)));
  CHECK_FALSE(first);
  CHECK_FALSE(second);
  CHECK_FALSE(cache.load("spirv", 1).has_value());  // a plain miss
  CHECK(cache.warnings() == 1);
  const std::string text = err.text();
  CHECK(count_lines(text) == 1);
  CHECK(text.find("kiln: warning: [disk_cache] cannot store " +
                  cache.path_for("spirv", 1).string() +
                  ": cannot create directory") == 0);
  CHECK(text.find("Not a directory") != std::string::npos);
  CHECK(read_bytes(blocker) == std::vector<std::uint8_t>{1, 2, 3});
}

TEST_CASE(
    "a write that fails midway keeps the old entry and leaves no temp file") {
  // RLIMIT_FSIZE makes write() fail with EFBIG past 64 KiB, as a full disk
  // would (the tests may run as root, so a read-only directory proves nothing).
  // In a child process, so the limit cannot touch the test runner's own files.
  TempDir tmp;
  const auto old_payload = bytes(1000, 5);
  REQUIRE(DiskCache(tmp.path(), lavapipe()).store("spirv", 1, old_payload));
  fflush(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    rlimit limit{64 * 1024, 64 * 1024};
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) ::_exit(10);
    DiskCache cache(tmp.path(), lavapipe());
    const int devnull = ::open("/dev/null", O_WRONLY);
    ::dup2(devnull, 2);  // the expected warning
    if (cache.store("spirv", 1, bytes(1 << 20, 6))) ::_exit(11);
    if (cache.warnings() != 1) ::_exit(12);
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  DiskCache cache(tmp.path(), lavapipe());
  CHECK(cache.load("spirv", 1) == old_payload);
  CHECK(files_under(tmp.path()) ==
        fs::relative(cache.path_for("spirv", 1), tmp.path()).string());
}

TEST_CASE("a kind that cannot name a file is a ValueError") {
  TempDir tmp;
  DiskCache cache(tmp.path(), lavapipe());
  for (const std::string& kind : std::vector<std::string>{
           "", "Spirv", "a/b", "..", "spirv.bin", std::string(33, 'k')}) {
    CAPTURE(kind);
    std::string message;
    try {
      cache.store(kind, 1, bytes(1, 1));
    } catch (const kiln::ValueError& e) {
      message = e.what();
    }
    CHECK(message == "[disk_cache] kind '" + kind +
                         "' must be 1 to 32 characters from [a-z0-9_-] (it "
                         "names files)");
    CHECK_THROWS_AS(cache.load(kind, 1), kiln::ValueError);
  }
  CHECK(files_under(tmp.path()) == "");
  CHECK(cache.store(std::string(32, 'k'), 1, bytes(1, 1)));
  CHECK(cache.store("pipeline_cache-2", 1, bytes(1, 1)));
}

TEST_CASE("concurrent writers and readers only ever see complete payloads") {
  // Processes (fork) and threads store payloads of different sizes under one
  // key while others load it: every hit must be one writer's whole payload,
  // with no warning (a torn or mixed file would fail its checksum and warn).
  constexpr int kProcesses = 3;
  constexpr int kThreads = 2;
  constexpr std::uint32_t kStores = 40;
  TempDir tmp;

  fflush(nullptr);
  std::vector<pid_t> children;
  for (int w = 0; w < kProcesses; ++w) {  // fork while single-threaded
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      DiskCache cache(tmp.path(), lavapipe());
      for (std::uint32_t i = 0; i < kStores; ++i) {
        if (!cache.store("spirv", 1, tagged_payload(w, i))) ::_exit(1);
        // The name can only be replaced, never removed: this must hit.
        const auto got = cache.load("spirv", 1);
        if (!got) ::_exit(2);
        if (!check_tagged(*got)) ::_exit(3);
      }
      ::_exit(cache.warnings() == 0 ? 0 : 4);
    }
    children.push_back(pid);
  }

  DiskCache shared(tmp.path(), lavapipe());  // one object, many threads
  std::atomic<bool> stop{false};
  std::atomic<int> hits{0};
  std::atomic<int> bad{0};
  std::atomic<int> failed_stores{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&] {
      while (!stop.load()) {
        if (auto got = shared.load("spirv", 1)) {
          ++hits;
          if (!check_tagged(*got)) ++bad;
        }
      }
    });
  }
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&, t] {
      DiskCache own(tmp.path(), lavapipe());
      for (std::uint32_t i = 0; i < kStores; ++i) {
        DiskCache& cache = i % 2 == 0 ? own : shared;
        if (!cache.store("spirv", 1, tagged_payload(kProcesses + t, i))) {
          ++failed_stores;
        }
      }
    });
  }
  for (auto& w : writers) w.join();
  for (pid_t pid : children) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  stop = true;
  for (auto& r : readers) r.join();

  CHECK(failed_stores == 0);
  CHECK(bad == 0);
  CHECK(hits > 0);
  CHECK(shared.warnings() == 0);
  const auto last = shared.load("spirv", 1);
  REQUIRE(last.has_value());
  CHECK(check_tagged(*last));
  CHECK(files_under(tmp.path()) ==
        fs::relative(shared.path_for("spirv", 1), tmp.path()).string());
}

TEST_CASE("verify_entry checks a file's bytes without a device or a file") {
  const auto payload = bytes(40, 3);
  const std::vector<std::uint8_t> file =
      kiln::vk::encode_entry(lavapipe(), "spirv", 7, payload);
  REQUIRE(file.size() == kDiskCacheHeaderSize + payload.size());
  CHECK(kiln::vk::verify_entry(file, lavapipe(), "spirv", 7).empty());
  CHECK(std::equal(file.begin() + kDiskCacheHeaderSize, file.end(), payload.begin()));
  CHECK(kiln::vk::verify_entry(file, lavapipe(), "spirv", 8) ==
        "holds spirv key 0x0000000000000007, expected spirv key 0x0000000000000008");
  std::vector<std::uint8_t> cut(file.begin(), file.end() - 1);
  CHECK(kiln::vk::verify_entry(cut, lavapipe(), "spirv", 7) ==
        "truncated: the header promises 40 payload bytes, the file has 39");
  std::vector<std::uint8_t> flipped = file;
  flipped.back() ^= 1;
  CHECK(kiln::vk::verify_entry(flipped, lavapipe(), "spirv", 7) ==
        "checksum mismatch (corrupt header or payload)");
}

TEST_CASE("a spirv entry with a valid checksum over bad contents is a miss, not a kernel") {
  using kiln::vk::decode_spirv_payload;
  using kiln::vk::encode_spirv_payload;
  const std::string text = "; a kernel's text";
  const std::vector<std::uint32_t> words = {0x07230203, 0x00010300, 0, 10, 0, 42};
  const auto payload = encode_spirv_payload(text, words);
  CHECK(decode_spirv_payload(payload, text) == words);
  // Made from another kernel's text.
  CHECK_FALSE(decode_spirv_payload(payload, "; another kernel").has_value());
  // Words that are not SPIR-V (no magic number), or too few for its header.
  std::vector<std::uint32_t> garbage = words;
  garbage[0] = 0xdeadbeef;
  CHECK_FALSE(decode_spirv_payload(encode_spirv_payload(text, garbage), text).has_value());
  CHECK_FALSE(decode_spirv_payload(encode_spirv_payload(text, std::span(words).first(4)), text)
                  .has_value());
  // A text length past the payload, a ragged word count, nothing at all.
  std::vector<std::uint8_t> bad = payload;
  bad[3] = 0x7f;
  CHECK_FALSE(decode_spirv_payload(bad, text).has_value());
  bad = payload;
  bad.push_back(0);
  CHECK_FALSE(decode_spirv_payload(bad, text).has_value());
  CHECK_FALSE(decode_spirv_payload({}, text).has_value());
  // Through a DiskCache: the entry verifies (its checksum is right) but decodes
  // to nothing, so the pipeline cache assembles the kernel again and stores it.
  TempDir tmp;
  DiskCache cache(tmp.path(), lavapipe());
  CHECK(cache.store("spirv", 9, encode_spirv_payload(text, garbage)));
  const auto hit = cache.load("spirv", 9);
  REQUIRE(hit.has_value());
  CHECK_FALSE(decode_spirv_payload(*hit, text).has_value());
}

TEST_CASE("a sparse 64 GiB file where an entry should be is a warning and a miss, not bad_alloc") {
  TempDir tmp;
  DiskCache cache(tmp.path(), lavapipe());
  REQUIRE(cache.store("spirv", 9, bytes(100, 4)));
  const fs::path path = cache.path_for("spirv", 9);
  fs::resize_file(path, std::uintmax_t{64} << 30);  // sparse: no disk used
  CHECK_FALSE(cache.load("spirv", 9).has_value());
  CHECK(cache.warnings() == 1);
  // Stored again, it is read again.
  REQUIRE(cache.store("spirv", 9, bytes(100, 4)));
  CHECK(cache.load("spirv", 9) == bytes(100, 4));
}
