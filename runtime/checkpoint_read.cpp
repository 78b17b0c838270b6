// Reading checkpoints: see checkpoint_read.hpp.
#include "kiln/runtime/checkpoint_read.hpp"

#include <unistd.h>
#include <unzip.h>
#include <zlib.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kiln/runtime/checkpoint.hpp"
#include "kiln/runtime/checkpoint_manifest.hpp"
#include "kiln/runtime/npy.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::detail::ckpt {
namespace {

// Member data is read in chunks of at most this many bytes (pread's limit is
// 2 GiB per call on Linux).
constexpr std::size_t kChunk = std::size_t{1} << 30;
// The manifest is read without trusting the archive's size field.
constexpr std::size_t kMaxManifestBytes = std::size_t{1} << 30;

std::string errno_text() { return std::strerror(errno); }

std::uint64_t le(const unsigned char* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

// The zip archive: minizip walks its directory (and finds zip64 end records);
// each entry's fields and each member's data are read here. Debian's minizip
// 1.1 does not read an entry's zip64 extra field on LP64 systems (it compares
// the 32-bit 0xFFFFFFFF marker with (unsigned long)-1), so a member of 4 GiB
// or more, or one that starts past 4 GiB, saved but did not load.
class ZipReader {
 public:
  struct Entry {
    std::uint64_t size = 0;  // uncompressed, as the directory says
    std::uint64_t compressed = 0;
    std::uint64_t offset = 0;  // of its local header
    std::uint32_t crc = 0;
    unsigned method = 0;
    unsigned flag = 0;
  };

  ZipReader(const std::filesystem::path& path, std::string_view ctx)
      : ctx_(ctx) {
    // minizip says only "cannot open"; find out why first.
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) fail(str_cat("cannot open: ", errno_text()));
    file_.reset(f);
    if (!read_end_record(f)) {
      fail("not a zip archive, or truncated (no zip directory at its end)");
    }
    zip_.reset(unzOpen64(path.c_str()));
    if (zip_ == nullptr) {
      fail("not a zip archive, or truncated (no zip directory at its end)");
    }
    index();
  }
  ~ZipReader() {
    if (inflating_) inflateEnd(&z_);
  }
  ZipReader(const ZipReader&) = delete;
  ZipReader& operator=(const ZipReader&) = delete;

  const Entry* find(const std::string& name) const {
    auto it = entries_.find(name);
    return it == entries_.end() ? nullptr : &it->second;
  }
  // Every member's name, sorted.
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    out.reserve(entries_.size());
    for (const auto& [name, e] : entries_) out.push_back(name);
    std::sort(out.begin(), out.end());
    return out;
  }

  // Makes `name` the member that read() and finish() work on. Its local header
  // must agree with its directory entry (signature, method, name, and the CRC
  // and sizes unless they follow the data), as minizip required.
  void open(const std::string& name, const Entry& e) {
    member_ = name;
    check_plausible(e);
    if ((e.flag & 1) != 0) fail_member("encrypted members are not supported");
    if (e.method != 0 && e.method != Z_DEFLATED) {
      fail_member(str_cat("unsupported compression method ", e.method));
    }
    unsigned char h[30];
    if (!read_at(e.offset, h, sizeof(h)) || le(h, 4) != 0x04034b50 || le(h + 8, 2) != e.method ||
        le(h + 26, 2) != name.size()) {
      fail_member("corrupt local header");
    }
    const bool described_after = (e.flag & 8) != 0;
    const auto differs = [&](std::uint64_t local, std::uint64_t central) {
      return !described_after && local != 0xFFFFFFFF && local != central;
    };
    if (differs(le(h + 14, 4), e.crc) || differs(le(h + 18, 4), e.compressed) ||
        differs(le(h + 22, 4), e.size)) {
      fail_member("corrupt local header");
    }
    std::string local_name(name.size(), '\0');
    if (!read_at(e.offset + 30, local_name.data(), local_name.size()) || local_name != name) {
      fail_member("corrupt local header");
    }
    at_ = e.offset + 30 + name.size() + le(h + 28, 2);
    in_left_ = e.compressed;
    out_left_ = e.size;
    crc_ = crc32(0, nullptr, 0);
    expected_crc_ = e.crc;
    if (inflating_) inflateEnd(&z_);
    inflating_ = false;
    if (e.method == Z_DEFLATED) {
      z_ = z_stream{};
      if (inflateInit2(&z_, -MAX_WBITS) != Z_OK) fail_member("cannot start inflating");
      inflating_ = true;
      stream_end_ = false;
    }
  }

  // Reads up to n bytes; returns how many (fewer only at the member's end).
  std::size_t read(void* dst, std::size_t n) {
    char* p = static_cast<char*>(dst);
    const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(n, out_left_));
    std::size_t done = inflating_ ? inflate_into(p, want) : copy_into(p, want);
    if (done > 0) crc_ = crc32_z(crc_, reinterpret_cast<const Bytef*>(p), done);  // (null: 0)
    out_left_ -= done;
    return done;
  }
  void read_exact(void* dst, std::size_t n) {
    if (read(dst, n) != n) fail_member("data ends early (truncated)");
  }
  // Checks that the member ends here and that its CRC matches.
  void finish() {
    if (out_left_ != 0) fail_member("longer than its header says");
    if (inflating_) {
      inflateEnd(&z_);
      inflating_ = false;
    }
    if (crc_ != expected_crc_) fail_member("CRC mismatch (corrupt data)");
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
  // Reads n bytes at `offset` of the file; false if it has fewer.
  bool read_at(std::uint64_t offset, void* dst, std::size_t n) const {
    char* p = static_cast<char*>(dst);
    while (n > 0) {
      const ssize_t r = ::pread(::fileno(file_.get()), p, std::min(n, kChunk),
                                static_cast<off_t>(offset));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
      p += r;
      offset += static_cast<std::uint64_t>(r);
      n -= static_cast<std::size_t>(r);
    }
    return true;
  }

  // A stored member's next `want` bytes.
  std::size_t copy_into(char* p, std::size_t want) {
    if (want > in_left_ || !read_at(at_, p, want)) fail_member("data ends early (truncated)");
    at_ += want;
    in_left_ -= want;
    return want;
  }

  // Up to `want` bytes inflated from a deflated member (fewer where its stream
  // ends first).
  std::size_t inflate_into(char* p, std::size_t want) {
    std::size_t done = 0;
    while (done < want && !stream_end_) {
      if (z_.avail_in == 0) {
        const std::size_t len = static_cast<std::size_t>(
            std::min<std::uint64_t>(in_left_, input_.size()));
        if (len == 0) fail_member("corrupt data (bad deflate data: the stream ends early)");
        if (!read_at(at_, input_.data(), len)) fail_member("data ends early (truncated)");
        at_ += len;
        in_left_ -= len;
        z_.next_in = reinterpret_cast<Bytef*>(input_.data());
        z_.avail_in = static_cast<uInt>(len);
      }
      const std::size_t chunk = std::min<std::size_t>(want - done, kChunk);
      z_.next_out = reinterpret_cast<Bytef*>(p + done);
      z_.avail_out = static_cast<uInt>(chunk);
      const int rc = inflate(&z_, Z_NO_FLUSH);
      const std::size_t made = chunk - z_.avail_out;
      done += made;
      if (rc == Z_STREAM_END) {
        stream_end_ = true;
      } else if ((rc != Z_OK && rc != Z_BUF_ERROR) ||
                 (rc == Z_BUF_ERROR && made == 0 && z_.avail_in != 0)) {
        fail_member("corrupt data (bad deflate data)");
      }
    }
    return done;
  }

  // What a member's directory entry says it holds must fit the file before
  // anything is allocated for it: a stored member is as long as its data, and
  // deflate expands at most ~1032:1, so a 6 MiB file cannot hold 1 GiB.
  void check_plausible(const Entry& e) const {
    constexpr std::uint64_t kMaxDeflateRatio = 1032;
    const bool stored = e.method == 0;
    if (e.compressed > file_size_ ||
        (stored && e.size != e.compressed) ||
        (!stored && e.size > e.compressed * kMaxDeflateRatio + 1024)) {
      fail_member(str_cat("its directory entry says ", e.size, " bytes (", e.compressed,
                          stored ? " stored" : " compressed", ") in a file of ", file_size_,
                          " bytes: corrupt or truncated"));
    }
  }

  // Whether the file ends exactly with a zip end-of-central-directory record
  // (22 bytes and its comment), which it keeps (the directory's end and its
  // 16-bit entry count). minizip finds the record's signature but reads its
  // missing last bytes as zeros, so a file cut there would still open.
  bool read_end_record(std::FILE* f) {
    constexpr long kRecord = 22;
    if (std::fseek(f, 0, SEEK_END) != 0) return false;
    const long size = std::ftell(f);
    file_size_ = size < 0 ? 0 : static_cast<std::uint64_t>(size);
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
        count16_ = static_cast<std::uint32_t>(le(p + 10, 2));
        directory_end_ = le(p + 16, 4) + le(p + 12, 4);  // offset + size (without zip64)
        return true;
      }
    }
    return false;
  }

  // The directory entry at `at` (minizip's position of it: from the archive's
  // start, which for kiln's files and numpy's is the file's), whose name
  // minizip read as `name`; sizes and the local header's offset from its zip64
  // extra field where the 32-bit ones say 0xFFFFFFFF.
  Entry read_entry(std::uint64_t at, const std::string& name) const {
    unsigned char h[46];
    if (!read_at(at, h, sizeof(h)) || le(h, 4) != 0x02014b50 || le(h + 28, 2) != name.size()) {
      fail("corrupt zip directory");
    }
    Entry e;
    e.flag = static_cast<unsigned>(le(h + 8, 2));
    e.method = static_cast<unsigned>(le(h + 10, 2));
    e.crc = static_cast<std::uint32_t>(le(h + 16, 4));
    e.compressed = le(h + 20, 4);
    e.size = le(h + 24, 4);
    e.offset = le(h + 42, 4);
    std::string rest(name.size() + le(h + 30, 2), '\0');
    if (!read_at(at + sizeof(h), rest.data(), rest.size()) ||
        rest.compare(0, name.size(), name) != 0) {
      fail("corrupt zip directory");
    }
    // Extra fields: (id, length, data)...; zip64's (id 1) holds the 64-bit
    // values of the fields at 0xFFFFFFFF, in this order.
    std::string_view extra = std::string_view(rest).substr(name.size());
    while (extra.size() >= 4) {
      const auto* x = reinterpret_cast<const unsigned char*>(extra.data());
      const std::size_t len = static_cast<std::size_t>(le(x + 2, 2));
      if (len > extra.size() - 4) break;
      if (le(x, 2) == 1) {
        std::string_view values = extra.substr(4, len);
        for (std::uint64_t* field : {&e.size, &e.compressed, &e.offset}) {
          if (*field != 0xFFFFFFFF) continue;
          if (values.size() < 8) fail(str_cat("member \"", name, "\": corrupt zip64 extra field"));
          *field = le(reinterpret_cast<const unsigned char*>(values.data()), 8);
          values.remove_prefix(8);
        }
      }
      extra.remove_prefix(4 + len);
    }
    return e;
  }

  // Names -> directory entries (unzLocateFile refuses names of 256 bytes
  // or more, and tree paths can be longer).
  //
  // A directory of exactly 65,535 entries records its count as 0xFFFF, which
  // zip reserves for "see the zip64 record", and some writers (Debian's
  // minizip 1.1) write no zip64 record then: minizip's reader then walks past
  // the directory's end. There the directory's end (its offset plus size)
  // says where the entries stop.
  void index() {
    std::vector<char> name(65536);
    unz_global_info64 global{};
    if (unzGetGlobalInfo64(zip_.get(), &global) != UNZ_OK) fail("corrupt zip directory");
    const bool count_unknown = global.number_entry == 0xFFFF && count16_ == 0xFFFF;
    std::uint64_t next = 0;  // where the entry after the current one starts
    int rc = unzGoToFirstFile(zip_.get());
    while (rc == UNZ_OK) {
      unz_file_info64 info{};
      if (unzGetCurrentFileInfo64(zip_.get(), &info, name.data(),
                                  static_cast<uLong>(name.size()), nullptr, 0,
                                  nullptr, 0) != UNZ_OK ||
          info.size_filename >= name.size()) {
        fail("corrupt zip directory");
      }
      unz64_file_pos pos{};
      if (unzGetFilePos64(zip_.get(), &pos) != UNZ_OK) fail("corrupt zip directory");
      std::string key(name.data(), info.size_filename);
      const Entry e = read_entry(pos.pos_in_zip_directory, key);
      constexpr std::uint64_t kDirectoryEntry = 46;  // fixed part
      next = pos.pos_in_zip_directory + kDirectoryEntry + info.size_filename +
             info.size_file_extra + info.size_file_comment;
      if (!entries_.emplace(key, e).second) {
        fail(str_cat("duplicate member \"", key, "\""));
      }
      if (count_unknown && entries_.size() >= 0xFFFF && next == directory_end_) {
        rc = UNZ_END_OF_LIST_OF_FILE;
        break;
      }
      rc = unzGoToNextFile(zip_.get());
    }
    if (rc != UNZ_END_OF_LIST_OF_FILE) fail("corrupt zip directory");
  }

  struct Close {
    void operator()(void* z) const { unzClose(z); }
  };
  struct CloseFile {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  // Closed also when the constructor throws after opening.
  std::unique_ptr<std::FILE, CloseFile> file_;
  std::unique_ptr<void, Close> zip_;
  // The open member: where its data continues, the compressed bytes after that,
  // the bytes it has still to give, the CRC so far and the directory's.
  std::uint64_t at_ = 0;
  std::uint64_t in_left_ = 0;
  std::uint64_t out_left_ = 0;
  std::uint32_t crc_ = 0;
  std::uint32_t expected_crc_ = 0;
  z_stream z_{};
  bool inflating_ = false;
  bool stream_end_ = false;
  // Deflated bytes read ahead (on the heap: a load may run on a small stack).
  std::vector<char> input_ = std::vector<char>(std::size_t{1} << 16);
  std::uint64_t file_size_ = 0;
  std::uint32_t count16_ = 0;       // the end record's entry count
  std::uint64_t directory_end_ = 0;  // the end record's directory offset + size
  std::string ctx_;
  std::string member_;
  std::unordered_map<std::string, Entry> entries_;
};

// The header of the open .npy member (its whole length, not parsed yet).
std::string read_npy_header(ZipReader& zip) {
  std::string header(npy::kPreludeBytes, '\0');
  zip.read_exact(header.data(), header.size());
  const std::size_t header_bytes =
      npy::header_size(header, zip.member_context());
  if (header_bytes < header.size()) zip.fail_member("npy header too short");
  header.resize(header_bytes);
  zip.read_exact(header.data() + npy::kPreludeBytes,
                 header_bytes - npy::kPreludeBytes);
  return header;
}

// The rest of the open member, which must be `nbytes` long after its
// `header_bytes` of header (the directory's size is checked, not trusted).
void check_member_size(const ZipReader& zip, const ZipReader::Entry& e,
                       std::size_t header_bytes, std::uint64_t nbytes,
                       std::string_view what) {
  if (e.size != header_bytes + nbytes) {
    zip.fail_member(str_cat("holds ", e.size, " bytes, but ", what, " takes ",
                            header_bytes + nbytes, " (wrong element count)"));
  }
}

// __kiln_manifest__.npy: the text as a 1-d uint8 array.
std::string read_manifest_npy(ZipReader& zip, const ZipReader::Entry& e) {
  zip.open(std::string(kManifestMember), e);
  const std::string header = read_npy_header(zip);
  const std::uint64_t n = npy::parse_bytes_header(header, zip.member_context());
  if (n > kMaxManifestBytes) zip.fail_member("too large");
  check_member_size(zip, e, header.size(), n,
                    str_cat("a manifest of ", n, " bytes"));
  std::string text(static_cast<std::size_t>(n), '\0');
  zip.read_exact(text.data(), text.size());
  zip.finish();
  return text;
}

// __kiln_manifest__.txt (files written before the manifest was an array).
std::string read_manifest_text(ZipReader& zip, const ZipReader::Entry& e) {
  zip.open(std::string(kLegacyManifestMember), e);
  std::string text;
  char buf[65536];
  while (std::size_t n = zip.read(buf, sizeof(buf))) {
    text.append(buf, n);
    if (text.size() > kMaxManifestBytes) zip.fail_member("too large");
  }
  if (text.size() != e.size) zip.fail_member("size differs from the directory");
  zip.finish();
  return text;
}

std::string read_manifest(ZipReader& zip) {
  if (const ZipReader::Entry* e = zip.find(std::string(kManifestMember))) {
    return read_manifest_npy(zip, *e);
  }
  if (const ZipReader::Entry* e =
          zip.find(std::string(kLegacyManifestMember))) {
    return read_manifest_text(zip, *e);
  }
  zip.fail(str_cat("no kiln manifest (", kManifestMember,
                   "): not a kiln checkpoint (numpy.savez files have none)"));
}

// The data of the open .npy member after its header, as an array of `h`.
Array read_npy_data(ZipReader& zip, const ZipReader::Entry& e, std::size_t header_bytes,
                    const npy::Header& h) {
  // parse_header checked that the byte size fits.
  const auto nbytes =
      static_cast<std::size_t>(shape_size(h.shape, size_of(h.dtype)).bytes);
  check_member_size(
      zip, e, header_bytes, nbytes,
      str_cat("a ", to_string(h.shape), " ", name(h.dtype), " array"));
  auto buf = HostBuffer::allocate(nbytes);
  zip.read_exact(buf->host_data(), nbytes);
  zip.finish();
  if (h.dtype == DType::kBool) {
    auto* p = static_cast<unsigned char*>(buf->host_data());
    std::transform(p, p + nbytes, p, [](unsigned char c) { return c != 0; });
  }
  return Array(h.dtype, h.shape, std::move(buf));
}

Array read_array(ZipReader& zip, const ManifestNode& node) {
  const ZipReader::Entry* e = zip.find(node.member);
  if (e == nullptr) {
    zip.fail(str_cat("member \"", node.member, "\" for ",
                     tree::display_path(node.path), " is missing"));
  }
  zip.open(node.member, *e);
  const std::string header = read_npy_header(zip);
  const npy::Header h = npy::parse_header(header, zip.member_context());
  if (h.dtype != node.dtype || h.shape != node.shape) {
    zip.fail_member(str_cat("npy header says ", name(h.dtype), " ",
                            to_string(h.shape), ", the manifest ",
                            name(node.dtype), " ", to_string(node.shape)));
  }
  return read_npy_data(zip, *e, header.size(), h);
}

}  // namespace

std::vector<std::pair<std::string, Array>> read_npz(
    const std::filesystem::path& path, const std::function<bool(const std::string&)>& select,
    bool skip_unsupported) {
  const std::string ctx = str_cat("[read_npz] ", path.string());
  ZipReader zip(path, ctx);
  std::vector<std::pair<std::string, Array>> out;
  for (const std::string& member : zip.names()) {
    if (!member.ends_with(".npy") || member == kManifestMember) continue;
    std::string name = member.substr(0, member.size() - 4);
    if (select && !select(name)) continue;
    const ZipReader::Entry& e = *zip.find(member);
    zip.open(member, e);
    const std::string header = read_npy_header(zip);
    const std::optional<npy::Header> h = npy::parse_header_if_known(header, zip.member_context());
    if (!h && skip_unsupported) continue;
    if (!h) {
      npy::parse_header(header, zip.member_context());  // throws, naming the dtype
      zip.fail_member("unsupported dtype");
    }
    out.emplace_back(std::move(name), read_npy_data(zip, e, header.size(), *h));
  }
  return out;
}


std::vector<Array> read_checkpoint(const std::filesystem::path& path,
                                   const TreeDef& def,
                                   std::span<const Array> like_leaves,
                                   bool check_statics) {
  const std::string ctx = str_cat("[load_checkpoint] ", path.string());
  ZipReader zip(path, ctx);
  const Manifest file = parse_manifest(read_manifest(zip), ctx);
  const Manifest like = make_manifest(def, like_leaves);
  const Comparison cmp = compare(file, like, check_statics);
  const std::vector<std::string>& diffs = cmp.differences;
  if (diffs.size() == 1) {
    throw TreeError(str_cat("[load_checkpoint] ", diffs[0], " (checkpoint ",
                            path.string(), ")"));
  }
  if (!diffs.empty()) {
    throw TreeError(str_cat("[load_checkpoint] checkpoint ", path.string(),
                            " does not match the template (", diffs.size(),
                            " differences):\n  ", join(diffs, "\n  ")));
  }
  // Same structure: each template array was compared with one file record.
  std::vector<Array> out;
  out.reserve(like_leaves.size());
  for (std::size_t record : cmp.file_arrays) {
    if (record == kNoRecord) zip.fail("manifest does not pair every array");
    out.push_back(read_array(zip, file.nodes[record]));
  }
  return out;
}

}  // namespace kiln::detail::ckpt
