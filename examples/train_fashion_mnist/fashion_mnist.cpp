#include "fashion_mnist.hpp"

#include <zlib.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <numeric>
#include <sstream>

namespace fmnist {
namespace {

[[noreturn]] void fail(const std::filesystem::path& path, const std::string& what) {
  throw kiln::ValueError("[fashion-mnist] " + path.string() + ": " + what);
}

struct GzFile {
  gzFile f = nullptr;
  ~GzFile() {
    if (f != nullptr) gzclose(f);
  }
};

// Reads exactly `n` bytes (or fails naming what was being read).
void read_exact(gzFile f, const std::filesystem::path& path, void* dst, std::size_t n,
                const char* what) {
  auto* out = static_cast<unsigned char*>(dst);
  std::size_t got = 0;
  while (got < n) {
    const unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(n - got, 1u << 30));
    const int r = gzread(f, out + got, chunk);
    if (r < 0) {
      int err = 0;
      const char* msg = gzerror(f, &err);
      fail(path, std::string("corrupt gzip data while reading ") + what + " (" + msg + ")");
    }
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
  }
  if (got != n) {
    std::ostringstream os;
    os << "truncated: expected " << n << " bytes of " << what << ", got " << got;
    fail(path, os.str());
  }
}

void check_split(const Split& s, const std::filesystem::path& dir, const char* name) {
  if (s.images.size() != s.labels.size() * kPixels) {
    std::ostringstream os;
    os << name << " has " << s.images.size() / kPixels << " images but " << s.labels.size()
       << " labels";
    fail(dir, os.str());
  }
  for (std::size_t i = 0; i < s.labels.size(); ++i) {
    if (s.labels[i] >= kClasses) {
      std::ostringstream os;
      os << name << " label " << i << " is " << int(s.labels[i]) << ", outside [0, 10)";
      fail(dir, os.str());
    }
  }
}

Split load_split(const std::filesystem::path& dir, const char* prefix) {
  const std::string p(prefix);
  Idx images = read_idx(dir / (p + "-images-idx3-ubyte.gz"));
  Idx labels = read_idx(dir / (p + "-labels-idx1-ubyte.gz"));
  if (images.dims.size() != 3 || images.dims[1] != 28 || images.dims[2] != 28) {
    fail(dir / (p + "-images-idx3-ubyte.gz"), "expected (N, 28, 28) images");
  }
  if (labels.dims.size() != 1) fail(dir / (p + "-labels-idx1-ubyte.gz"), "expected (N,) labels");
  Split s{std::move(images.data), std::move(labels.data)};
  check_split(s, dir, prefix);
  return s;
}

std::pair<kiln::Array, kiln::Array> make_batch(const Split& split, std::int64_t n,
                                               auto&& index_of) {
  // Normalise through a 256-entry table: the same floats for every batch.
  std::array<float, 256> table{};
  for (int v = 0; v < 256; ++v) table[v] = (static_cast<float>(v) / 255.0f - kMean) / kStd;
  // Written straight into the arrays' buffers (no vector to zero and copy), in
  // slices of rows on kiln's pool: the threads that run the step, idle here.
  constexpr std::int64_t kRowsPerTask = 16;
  kiln::Array x = kiln::array<float>({n, kPixels}, [&](std::span<float> out) {
    kiln::parallel_for(static_cast<std::size_t>((n + kRowsPerTask - 1) / kRowsPerTask),
                       [&](std::size_t t) {
                         const auto b0 = static_cast<std::int64_t>(t) * kRowsPerTask;
                         for (std::int64_t b = b0; b < std::min(n, b0 + kRowsPerTask); ++b) {
                           const std::uint8_t* src = split.images.data() + index_of(b) * kPixels;
                           float* dst = out.data() + b * kPixels;
                           for (std::int64_t k = 0; k < kPixels; ++k) dst[k] = table[src[k]];
                         }
                       });
  });
  kiln::Array y = kiln::array<std::int32_t>({n}, [&](std::span<std::int32_t> out) {
    for (std::int64_t b = 0; b < n; ++b) out[static_cast<std::size_t>(b)] = split.labels[index_of(b)];
  });
  return {std::move(x), std::move(y)};
}

}  // namespace

void Split::truncate(std::int64_t n) {
  if (n <= 0 || n >= size()) return;
  images.resize(static_cast<std::size_t>(n * kPixels));
  labels.resize(static_cast<std::size_t>(n));
}

Idx read_idx(const std::filesystem::path& path) {
  if (!std::filesystem::exists(path)) {
    fail(path, "no such file (install Debian's dataset-fashion-mnist package, or pass "
               "--data DIR with the four *-ubyte.gz files)");
  }
  GzFile file;
  file.f = gzopen(path.c_str(), "rb");
  if (file.f == nullptr) fail(path, std::string("cannot open: ") + std::strerror(errno));
  std::array<unsigned char, 4> magic{};
  read_exact(file.f, path, magic.data(), magic.size(), "the IDX header");
  // Magic: two zero bytes, the element type (0x08: unsigned byte), the rank.
  if (magic[0] != 0 || magic[1] != 0 || magic[2] != 0x08 || magic[3] < 1 || magic[3] > 4) {
    std::ostringstream os;
    os << "not an IDX file of unsigned bytes (header " << std::hex << int(magic[0]) << " "
       << int(magic[1]) << " " << int(magic[2]) << " " << int(magic[3]) << ")";
    fail(path, os.str());
  }
  Idx idx;
  std::int64_t total = 1;
  for (int d = 0; d < magic[3]; ++d) {
    std::array<unsigned char, 4> be{};
    read_exact(file.f, path, be.data(), be.size(), "the IDX dimensions");
    const std::int64_t n = (std::int64_t(be[0]) << 24) | (be[1] << 16) | (be[2] << 8) | be[3];
    if (n <= 0 || n > (1 << 24)) fail(path, "implausible dimension " + std::to_string(n));
    idx.dims.push_back(n);
    total *= n;
  }
  if (total > (std::int64_t(1) << 31)) fail(path, "implausibly large");
  idx.data.resize(static_cast<std::size_t>(total));
  read_exact(file.f, path, idx.data.data(), idx.data.size(), "data");
  unsigned char extra = 0;
  if (gzread(file.f, &extra, 1) != 0) fail(path, "has trailing bytes after the data");
  return idx;
}

Dataset load(const std::filesystem::path& dir) {
  return Dataset{load_split(dir, "train"), load_split(dir, "t10k")};
}

std::pair<kiln::Array, kiln::Array> gather(const Split& split,
                                           std::span<const std::int32_t> indices) {
  return make_batch(split, static_cast<std::int64_t>(indices.size()),
                    [&](std::int64_t b) { return std::int64_t(indices[b]); });
}

std::pair<kiln::Array, kiln::Array> slice(const Split& split, std::int64_t begin,
                                          std::int64_t end) {
  return make_batch(split, end - begin, [&](std::int64_t b) { return begin + b; });
}

}  // namespace fmnist
