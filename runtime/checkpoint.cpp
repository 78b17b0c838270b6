// Checkpoints (see checkpoint.hpp): writing the .npz archive through Debian's
// minizip (zlib's contrib/minizip) with the atomic temp-file + fsync + rename,
// and loading: checkpoint_read.cpp reads the file into host arrays, which go
// to the template leaves' devices here.
#include "kiln/runtime/checkpoint.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>
#include <zip.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <unordered_map>

#include "kiln/runtime/checkpoint_manifest.hpp"
#include "kiln/runtime/checkpoint_read.hpp"
#include "kiln/runtime/file_io.hpp"
#include "kiln/runtime/npy.hpp"
#include "kiln/runtime/strings.hpp"

static_assert(std::endian::native == std::endian::little,
              "kiln checkpoints write array bytes as stored: little-endian");

namespace kiln {
namespace {

using detail::str_cat;
using detail::ckpt::Manifest;

// minizip takes lengths as unsigned int: write in chunks.
constexpr std::size_t kChunk = std::size_t{1} << 30;

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

// Removes the temporary files that saves of `path` killed before their rename
// left (path.tmp.<pid>.<hex>, of a process that no longer exists); a save in
// progress in a live process keeps its file. Best effort: a directory kiln
// cannot list or a file it cannot remove is left as it is.
void remove_stale_temps(const std::filesystem::path& path) {
  const std::string prefix = path.filename().string() + ".tmp.";
  std::error_code ec;
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : ".";
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(prefix)) continue;
    const std::string_view rest = std::string_view(name).substr(prefix.size());
    long pid = 0;
    const auto [end, err] = std::from_chars(rest.data(), rest.data() + rest.size(), pid);
    if (err != std::errc() || end == rest.data() || *end != '.' || pid <= 0) continue;
    if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      std::filesystem::remove(entry.path(), ec);
    }
  }
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

// Two arrays (or an array and the manifest) in one member would make the file
// unreadable: a field named __kiln_manifest__, or a struct's member_paths
// hook giving two arrays one path.
void check_unique_members(const Manifest& manifest, std::string_view ctx) {
  std::unordered_map<std::string_view, std::string> taken{
      {detail::ckpt::kManifestMember, "the manifest"}};
  for (const detail::ckpt::ManifestNode& node : manifest.nodes) {
    if (node.kind != NodeKind::kArray) continue;
    const auto [it, fresh] =
        taken.emplace(node.member, tree::display_path(node.path));
    if (!fresh) {
      throw CheckpointError(
          str_cat(ctx, ": ", it->second, " and ", tree::display_path(node.path),
                  " would both be stored as member \"", node.member, "\""));
    }
  }
}

}  // namespace

namespace detail {

void write_atomically(const std::filesystem::path& path, std::string_view ctx,
                      const std::function<void(const std::string& temp)>& write) {
  remove_stale_temps(path);
  TempFile tmp{temp_path(path)};
  write(tmp.path);
  fsync_path(tmp.path, false, ctx);
  if (std::rename(tmp.path.c_str(), path.c_str()) != 0) {
    throw CheckpointError(str_cat(ctx, ": cannot rename ", tmp.path, ": ", errno_text()));
  }
  tmp.keep = true;
  const std::filesystem::path dir = path.parent_path();
  fsync_path(dir.empty() ? "." : dir.string(), true, ctx);
}

void save_checkpoint_flat(const std::filesystem::path& path, const TreeDef& def,
                          std::span<const Array> leaves,
                          const SaveOptions& options) {
  const std::string ctx = str_cat("[save_checkpoint] ", path.string());
  const std::vector<std::string> leaf_paths = tree::paths(def);
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    check_not_donated("save_checkpoint", leaves[i], tree::display_path(leaf_paths[i]));
    if (leaves[i].buffer() == nullptr) {
      throw ValueError(str_cat(ctx, ": ", tree::display_path(leaf_paths[i]),
                               " is a tracer (inside grad or jit); save "
                               "concrete arrays"));
    }
  }
  const Manifest manifest = ckpt::make_manifest(def, leaves);
  check_unique_members(manifest, ctx);
  write_atomically(path, ctx, [&](const std::string& temp) {
    ZipWriter zip(temp, options.compress, ctx);
    const std::string manifest_name(ckpt::kManifestMember);
    const std::string data =
        ckpt::manifest_member_data(ckpt::format_manifest(manifest));
    zip.begin(manifest_name, data.size());
    zip.write(data.data(), data.size(), manifest_name);
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
  });
}

std::vector<Array> load_checkpoint_flat(const std::filesystem::path& path,
                                        const TreeDef& def,
                                        std::span<const Array> like_leaves,
                                        const LoadOptions& options) {
  std::vector<Array> out =
      ckpt::read_checkpoint(path, def, like_leaves, options.check_statics);
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i] = to_device(out[i], like_leaves[i].device());
  }
  return out;
}

}  // namespace detail
}  // namespace kiln
