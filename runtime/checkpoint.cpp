// Checkpoints (see checkpoint.hpp): the .npz archive through Debian's minizip
// (zlib's contrib/minizip), .npy headers from npy.cpp, the manifest from
// checkpoint_manifest.cpp, and the atomic temp-file + fsync + rename.
#include "kiln/runtime/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <unzip.h>
#include <zip.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <unordered_map>

#include "kiln/dsl/ops.hpp"  // to_device (as runtime/xtensor.hpp)
#include "kiln/runtime/checkpoint_manifest.hpp"
#include "kiln/runtime/npy.hpp"
#include "kiln/runtime/strings.hpp"

static_assert(std::endian::native == std::endian::little,
              "kiln checkpoints write array bytes as stored: little-endian");

namespace kiln {
namespace {

using detail::str_cat;
using detail::ckpt::Manifest;
using detail::ckpt::ManifestNode;

// minizip takes lengths as unsigned int: write and read in chunks.
constexpr std::size_t kChunk = std::size_t{1} << 30;
// The manifest is read without trusting the archive's size field.
constexpr std::size_t kMaxManifestBytes = std::size_t{1} << 30;

std::string errno_text() { return std::strerror(errno); }

// ---- writing ----

class ZipWriter {
 public:
  ZipWriter(const std::string& path, bool compress, std::string_view ctx)
      : compress_(compress), ctx_(ctx) {
    errno = 0;
    zip_ = zipOpen64(path.c_str(), APPEND_STATUS_CREATE);
    if (zip_ == nullptr) {
      throw CheckpointError(
          str_cat(ctx_, ": cannot create ", path, ": ", errno_text()));
    }
  }
  ~ZipWriter() {
    if (zip_ != nullptr) zipClose(zip_, nullptr);  // after an error: discard
  }
  ZipWriter(const ZipWriter&) = delete;
  ZipWriter& operator=(const ZipWriter&) = delete;

  void begin(const std::string& name, std::size_t nbytes) {
    if (name.size() >= 0xffff) {
      throw CheckpointError(
          str_cat(ctx_, ": member name too long (", name.size(), " bytes)"));
    }
    zip_fileinfo info{};
    // A fixed date: equal trees give byte-identical files.
    info.tmz_date.tm_year = 1980;
    info.tmz_date.tm_mday = 1;
    const int zip64 = nbytes >= 0xffffff00u ? 1 : 0;
    check(zipOpenNewFileInZip64(zip_, name.c_str(), &info, nullptr, 0, nullptr,
                                0, nullptr, compress_ ? Z_DEFLATED : 0,
                                compress_ ? Z_DEFAULT_COMPRESSION : 0, zip64),
          name);
  }
  void write(const void* data, std::size_t n, const std::string& name) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const std::size_t len = std::min(n, kChunk);
      check(zipWriteInFileInZip(zip_, p, static_cast<unsigned>(len)), name);
      p += len;
      n -= len;
    }
  }
  void end(const std::string& name) { check(zipCloseFileInZip(zip_), name); }
  void close() {
    zipFile z = std::exchange(zip_, nullptr);
    errno = 0;
    if (zipClose(z, nullptr) != ZIP_OK) {
      throw CheckpointError(str_cat(ctx_, ": writing failed: ", errno_text()));
    }
  }

 private:
  void check(int rc, const std::string& name) {
    if (rc != ZIP_OK) {
      throw CheckpointError(
          str_cat(ctx_, ": writing ", name, " failed (", errno_text(), ")"));
    }
  }

  zipFile zip_ = nullptr;
  bool compress_;
  std::string ctx_;
};

std::string temp_path(const std::filesystem::path& path) {
  std::random_device rd;
  const std::uint64_t r = (std::uint64_t{rd()} << 32) | rd();
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx",
                static_cast<unsigned long long>(r));
  return str_cat(path.string(), ".tmp.", ::getpid(), ".", hex);
}

void fsync_path(const std::string& path, bool directory, std::string_view ctx) {
  const int fd = ::open(path.c_str(), O_RDONLY | (directory ? O_DIRECTORY : 0));
  if (fd < 0) {
    if (directory) return;  // best effort: some filesystems refuse
    throw CheckpointError(
        str_cat(ctx, ": cannot reopen ", path, ": ", errno_text()));
  }
  const int rc = ::fsync(fd);
  const std::string err = errno_text();
  ::close(fd);
  if (rc != 0 && !directory) {
    throw CheckpointError(str_cat(ctx, ": fsync of ", path, " failed: ", err));
  }
}

// Removes the temporary file unless the save got as far as renaming it.
struct TempFile {
  std::string path;
  bool keep = false;
  ~TempFile() {
    if (!keep) ::unlink(path.c_str());
  }
};

// ---- reading ----

class ZipReader {
 public:
  struct Entry {
    unz64_file_pos pos;
    std::uint64_t size = 0;  // uncompressed, as the directory says
  };

  ZipReader(const std::filesystem::path& path, std::string_view ctx)
      : ctx_(ctx) {
    // minizip says only "cannot open"; find out why first.
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) fail(str_cat("cannot open: ", errno_text()));
    const bool complete = ends_with_end_record(f);
    std::fclose(f);
    if (!complete) {
      fail("not a zip archive, or truncated (no zip directory at its end)");
    }
    zip_.reset(unzOpen64(path.c_str()));
    if (zip_ == nullptr) {
      fail("not a zip archive, or truncated (no zip directory at its end)");
    }
    index();
  }
  ~ZipReader() {
    if (open_) unzCloseCurrentFile(zip_.get());
  }
  ZipReader(const ZipReader&) = delete;
  ZipReader& operator=(const ZipReader&) = delete;

  const Entry* find(const std::string& name) const {
    auto it = entries_.find(name);
    return it == entries_.end() ? nullptr : &it->second;
  }

  // Makes `name` the member that read() and finish() work on.
  void open(const std::string& name, const Entry& e) {
    member_ = name;
    unz64_file_pos pos = e.pos;
    unz_file_info64 info{};
    if (unzGoToFilePos64(zip_.get(), &pos) != UNZ_OK ||
        unzGetCurrentFileInfo64(zip_.get(), &info, nullptr, 0, nullptr, 0,
                                nullptr, 0) != UNZ_OK) {
      fail_member("corrupt zip directory entry");
    }
    if ((info.flag & 1) != 0)
      fail_member("encrypted members are not supported");
    if (info.compression_method != 0 && info.compression_method != Z_DEFLATED) {
      fail_member(
          str_cat("unsupported compression method ", info.compression_method));
    }
    if (unzOpenCurrentFile(zip_.get()) != UNZ_OK) {
      fail_member("corrupt local header");
    }
    open_ = true;
  }

  // Reads up to n bytes; returns how many (fewer only at the member's end).
  std::size_t read(void* dst, std::size_t n) {
    char* p = static_cast<char*>(dst);
    std::size_t done = 0;
    while (done < n) {
      const auto len = static_cast<unsigned>(std::min(n - done, kChunk));
      const int r = unzReadCurrentFile(zip_.get(), p + done, len);
      if (r < 0) fail_member(str_cat("corrupt data (", error_text(r), ")"));
      if (r == 0) break;
      done += static_cast<std::size_t>(r);
    }
    return done;
  }
  void read_exact(void* dst, std::size_t n) {
    if (read(dst, n) != n) fail_member("data ends early (truncated)");
  }
  // Checks that the member ends here and that its CRC matches.
  void finish() {
    char extra;
    if (read(&extra, 1) != 0) fail_member("longer than its header says");
    open_ = false;
    const int rc = unzCloseCurrentFile(zip_.get());
    if (rc == UNZ_CRCERROR) fail_member("CRC mismatch (corrupt data)");
    if (rc != UNZ_OK) fail_member(str_cat("corrupt (", error_text(rc), ")"));
  }

  [[noreturn]] void fail(std::string_view what) const {
    throw CheckpointError(str_cat(ctx_, ": ", what));
  }
  [[noreturn]] void fail_member(std::string_view what) const {
    fail(str_cat("member \"", member_, "\": ", what));
  }
  std::string member_context() const {
    return str_cat(ctx_, ": member \"", member_, "\"");
  }

 private:
  static std::string error_text(int rc) {
    switch (rc) {
      case UNZ_ERRNO:
        return "read error";
      case UNZ_BADZIPFILE:
        return "bad zip structure";
      case Z_DATA_ERROR:
        return "bad deflate data";
      case UNZ_CRCERROR:
        return "CRC mismatch";
      default:
        return str_cat("minizip error ", rc);
    }
  }

  // Whether the file ends exactly with a zip end-of-central-directory record
  // (22 bytes and its comment). minizip finds the record's signature but reads
  // its missing last bytes as zeros, so a file cut there would still open.
  static bool ends_with_end_record(std::FILE* f) {
    constexpr long kRecord = 22;
    if (std::fseek(f, 0, SEEK_END) != 0) return false;
    const long size = std::ftell(f);
    const long tail = std::min<long>(size, kRecord + 0xffff);
    if (tail < kRecord || std::fseek(f, size - tail, SEEK_SET) != 0) {
      return false;
    }
    std::string bytes(static_cast<std::size_t>(tail), '\0');
    if (std::fread(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
      return false;
    }
    for (long at = tail - kRecord; at >= 0; --at) {
      const auto* p = reinterpret_cast<const unsigned char*>(bytes.data() + at);
      if (p[0] == 'P' && p[1] == 'K' && p[2] == 5 && p[3] == 6 &&
          at + kRecord + (p[20] | p[21] << 8) == tail) {
        return true;
      }
    }
    return false;
  }

  // Names -> directory positions (unzLocateFile refuses names of 256 bytes
  // or more, and tree paths can be longer).
  void index() {
    std::vector<char> name(65536);
    int rc = unzGoToFirstFile(zip_.get());
    while (rc == UNZ_OK) {
      unz_file_info64 info{};
      if (unzGetCurrentFileInfo64(zip_.get(), &info, name.data(),
                                  static_cast<uLong>(name.size()), nullptr, 0,
                                  nullptr, 0) != UNZ_OK ||
          info.size_filename >= name.size()) {
        fail("corrupt zip directory");
      }
      Entry e;
      if (unzGetFilePos64(zip_.get(), &e.pos) != UNZ_OK)
        fail("corrupt zip directory");
      e.size = info.uncompressed_size;
      std::string key(name.data(), info.size_filename);
      if (!entries_.emplace(key, e).second) {
        fail(str_cat("duplicate member \"", key, "\""));
      }
      rc = unzGoToNextFile(zip_.get());
    }
    if (rc != UNZ_END_OF_LIST_OF_FILE) fail("corrupt zip directory");
  }

  struct Close {
    void operator()(void* z) const { unzClose(z); }
  };
  // Closed also when the constructor throws after opening.
  std::unique_ptr<void, Close> zip_;
  bool open_ = false;
  std::string ctx_;
  std::string member_;
  std::unordered_map<std::string, Entry> entries_;
};

std::string read_manifest(ZipReader& zip) {
  const std::string name(detail::ckpt::kManifestMember);
  const ZipReader::Entry* e = zip.find(name);
  if (e == nullptr) {
    zip.fail(str_cat("no kiln manifest (", name,
                     "): not a kiln checkpoint (numpy.savez files have none)"));
  }
  zip.open(name, *e);
  std::string text;
  char buf[65536];
  while (std::size_t n = zip.read(buf, sizeof(buf))) {
    text.append(buf, n);
    if (text.size() > kMaxManifestBytes) zip.fail_member("too large");
  }
  if (text.size() != e->size)
    zip.fail_member("size differs from the directory");
  zip.finish();
  return text;
}

Array read_array(ZipReader& zip, const ManifestNode& node, Device device) {
  const ZipReader::Entry* e = zip.find(node.member);
  if (e == nullptr) {
    zip.fail(str_cat("member \"", node.member, "\" for ",
                     tree::display_path(node.path), " is missing"));
  }
  zip.open(node.member, *e);
  const std::string ctx = zip.member_context();
  std::string header(detail::npy::kPreludeBytes, '\0');
  zip.read_exact(header.data(), header.size());
  const std::size_t header_bytes = detail::npy::header_size(header, ctx);
  if (header_bytes < header.size()) zip.fail_member("npy header too short");
  header.resize(header_bytes);
  zip.read_exact(header.data() + detail::npy::kPreludeBytes,
                 header_bytes - detail::npy::kPreludeBytes);
  const detail::npy::Header h = detail::npy::parse_header(header, ctx);
  if (h.dtype != node.dtype || h.shape != node.shape) {
    zip.fail_member(str_cat("npy header says ", name(h.dtype), " ",
                            to_string(h.shape), ", the manifest ",
                            name(node.dtype), " ", to_string(node.shape)));
  }
  const std::size_t nbytes =
      static_cast<std::size_t>(numel(h.shape)) * size_of(h.dtype);
  if (e->size != header_bytes + nbytes) {
    zip.fail_member(str_cat("holds ", e->size, " bytes, but a ",
                            to_string(h.shape), " ", name(h.dtype),
                            " array takes ", header_bytes + nbytes,
                            " (wrong element count)"));
  }
  auto buf = HostBuffer::allocate(nbytes);
  zip.read_exact(buf->host_data(), nbytes);
  zip.finish();
  if (h.dtype == DType::kBool) {
    auto* p = static_cast<unsigned char*>(buf->host_data());
    std::transform(p, p + nbytes, p, [](unsigned char c) { return c != 0; });
  }
  return to_device(Array(h.dtype, h.shape, std::move(buf)), device);
}

}  // namespace

namespace detail {

void save_checkpoint_flat(const std::filesystem::path& path, const TreeDef& def,
                          std::span<const Array> leaves,
                          const SaveOptions& options) {
  const std::string ctx = str_cat("[save_checkpoint] ", path.string());
  const std::vector<std::string> leaf_paths = tree::paths(def);
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    if (leaves[i].buffer() == nullptr) {
      throw ValueError(str_cat(ctx, ": ", tree::display_path(leaf_paths[i]),
                               " is a tracer (inside grad or jit); save "
                               "concrete arrays"));
    }
  }
  const Manifest manifest = ckpt::make_manifest(def, leaves);
  TempFile tmp{temp_path(path)};
  {
    ZipWriter zip(tmp.path, options.compress, ctx);
    const std::string manifest_name(ckpt::kManifestMember);
    const std::string text = ckpt::format_manifest(manifest);
    zip.begin(manifest_name, text.size());
    zip.write(text.data(), text.size(), manifest_name);
    zip.end(manifest_name);
    std::size_t leaf = 0;
    std::vector<char> staging;
    for (const ckpt::ManifestNode& node : manifest.nodes) {
      if (node.kind != NodeKind::kArray) continue;
      const Array& a = leaves[leaf++];
      Buffer& buffer = *a.buffer();
      if (buffer.nbytes() < a.nbytes()) {
        throw CheckpointError(str_cat(ctx, ": ", tree::display_path(node.path),
                                      ": buffer of ", buffer.nbytes(),
                                      " bytes for ", a.nbytes()));
      }
      // Device memory is read through the buffer; host memory directly.
      const void* bytes = buffer.host_data();
      if (bytes == nullptr) {
        staging.resize(buffer.nbytes());
        buffer.read(staging.data());
        bytes = staging.data();
      }
      const std::string header = npy::make_header(a.dtype(), a.shape());
      zip.begin(node.member, header.size() + a.nbytes());
      zip.write(header.data(), header.size(), node.member);
      zip.write(bytes, a.nbytes(), node.member);
      zip.end(node.member);
    }
    zip.close();
  }
  fsync_path(tmp.path, false, ctx);
  if (std::rename(tmp.path.c_str(), path.c_str()) != 0) {
    throw CheckpointError(
        str_cat(ctx, ": cannot rename ", tmp.path, ": ", errno_text()));
  }
  tmp.keep = true;
  const std::filesystem::path dir = path.parent_path();
  fsync_path(dir.empty() ? "." : dir.string(), true, ctx);
}

std::vector<Array> load_checkpoint_flat(const std::filesystem::path& path,
                                        const TreeDef& def,
                                        std::span<const Array> like_leaves,
                                        const LoadOptions& options) {
  const std::string ctx = str_cat("[load_checkpoint] ", path.string());
  ZipReader zip(path, ctx);
  const Manifest file = ckpt::parse_manifest(read_manifest(zip), ctx);
  const Manifest like = ckpt::make_manifest(def, like_leaves);
  const std::vector<std::string> diffs =
      ckpt::compare(file, like, options.check_statics);
  if (diffs.size() == 1) {
    throw TreeError(str_cat("[load_checkpoint] ", diffs[0], " (checkpoint ",
                            path.string(), ")"));
  }
  if (!diffs.empty()) {
    throw TreeError(str_cat("[load_checkpoint] checkpoint ", path.string(),
                            " does not match the template (", diffs.size(),
                            " differences):\n  ", join(diffs, "\n  ")));
  }
  // Same structure: the array records are the template's, in leaf order.
  std::unordered_map<std::string_view, const ManifestNode*> by_path;
  for (const ManifestNode& n : file.nodes) {
    if (n.kind == NodeKind::kArray) by_path.emplace(n.path, &n);
  }
  std::vector<Array> out;
  out.reserve(like_leaves.size());
  for (const ManifestNode& n : like.nodes) {
    if (n.kind != NodeKind::kArray) continue;
    const ManifestNode* f = by_path.at(n.path);
    out.push_back(read_array(zip, *f, like_leaves[out.size()].device()));
  }
  return out;
}

}  // namespace detail
}  // namespace kiln
