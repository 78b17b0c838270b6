// Weights from other frameworks (weights.hpp): the safetensors reader and
// writer, numpy .npz through the checkpoint reader's zip code, and loading
// named arrays into a tree by its leaves' paths.
//
// safetensors (https://github.com/huggingface/safetensors): 8 bytes, the
// header's length N (little endian); N bytes of JSON, an object of
// name -> {"dtype", "shape", "data_offsets": [begin, end]} (offsets into the
// data after the header) and an optional "__metadata__" of strings; the data.
// Everything read is checked before use: the header's length against the
// file's, the JSON's kinds, each tensor's byte count against its dtype and
// shape (without overflow), its range within the data and apart from the
// others; data is read straight into each array's buffer.
#include "kiln/runtime/weights.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>

#include "kiln/runtime/buffer.hpp"
#include "kiln/runtime/checkpoint_read.hpp"
#include "kiln/runtime/file_io.hpp"
#include "kiln/runtime/half.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln {
namespace {

using detail::str_cat;

// The header is JSON text; the reference implementation refuses more than 100 MB.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

struct SafeDType {
  const char* name;
  DType dtype;
};
constexpr SafeDType kDTypes[] = {{"F64", DType::kF64}, {"F32", DType::kF32},
                                 {"F16", DType::kF16}, {"BF16", DType::kBF16},
                                 {"I32", DType::kI32}, {"U32", DType::kU32},
                                 {"BOOL", DType::kBool}};

std::optional<DType> dtype_of(std::string_view s) {
  for (const SafeDType& d : kDTypes) {
    if (s == d.name) return d.dtype;
  }
  return std::nullopt;
}
const char* name_of(DType d) {
  for (const SafeDType& s : kDTypes) {
    if (s.dtype == d) return s.name;
  }
  return "?";
}

struct CloseFile {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, CloseFile>;

struct Entry {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  std::uint64_t begin = 0, end = 0;
};

class SafetensorsReader {
 public:
  explicit SafetensorsReader(const std::filesystem::path& path)
      : ctx_(str_cat("[read_safetensors] ", path.string())) {
    file_.reset(std::fopen(path.c_str(), "rb"));
    if (file_ == nullptr) fail(str_cat("cannot open: ", std::strerror(errno)));
    if (std::fseek(file_.get(), 0, SEEK_END) != 0) fail("cannot seek");
    const long size = std::ftell(file_.get());
    if (size < 0) fail("cannot tell its size");
    size_ = static_cast<std::uint64_t>(size);
    unsigned char prefix[8];
    if (size_ < 8 || !read_at(0, prefix, 8)) {
      fail(str_cat("truncated: ", size_, " bytes, shorter than the 8-byte header length"));
    }
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | prefix[i];
    if (n > kMaxHeaderBytes) fail(str_cat("header length ", n, " is over the 100 MB limit"));
    if (n > size_ - 8) {
      fail(str_cat("truncated: the header says ", n, " bytes, the file has ", size_ - 8,
                   " after the length"));
    }
    header_bytes_ = n;
    std::string text(static_cast<std::size_t>(n), '\0');
    if (!read_at(8, text.data(), text.size())) fail("cannot read the header");
    parse(text);
  }

  const std::vector<Entry>& entries() const { return entries_; }

  Array read(const Entry& e) {
    const auto nbytes = static_cast<std::size_t>(e.end - e.begin);
    auto buf = HostBuffer::allocate(nbytes);
    if (!read_at(8 + header_bytes_ + e.begin, buf->host_data(), nbytes)) {
      fail(str_cat("tensor \"", e.name, "\": cannot read its ", nbytes, " bytes"));
    }
    if (e.dtype == DType::kBool) {
      auto* p = static_cast<unsigned char*>(buf->host_data());
      std::transform(p, p + nbytes, p, [](unsigned char c) { return c != 0; });
    }
    return Array(e.dtype, e.shape, std::move(buf));
  }

  [[noreturn]] void fail(std::string_view what) const {
    throw CheckpointError(str_cat(ctx_, ": ", what));
  }

  // Tensors of dtypes kiln lacks: their names, for the caller's decision.
  std::vector<std::pair<std::string, std::string>> unsupported;

 private:
  bool read_at(std::uint64_t offset, void* dst, std::size_t n) {
    if (n == 0) return true;
    if (offset > static_cast<std::uint64_t>(std::numeric_limits<long>::max()) ||
        std::fseek(file_.get(), static_cast<long>(offset), SEEK_SET) != 0) {
      return false;
    }
    return std::fread(dst, 1, n, file_.get()) == n;
  }

  void parse(const std::string& text) {
    const nlohmann::json header = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (header.is_discarded()) fail("the header is not JSON");
    if (!header.is_object()) fail("the header is not a JSON object");
    const std::uint64_t data_bytes = size_ - 8 - header_bytes_;
    for (const auto& item : header.items()) {
      const std::string& name = item.key();  // (not a structured binding: captured below)
      const nlohmann::json& v = item.value();
      if (name == "__metadata__") {
        if (!v.is_object()) fail("\"__metadata__\" is not an object");
        continue;
      }
      const auto bad = [&](std::string_view what) {
        fail(str_cat("tensor \"", name, "\": ", what));
      };
      if (!v.is_object()) bad("not an object");
      const auto dt = v.find("dtype");
      const auto sh = v.find("shape");
      const auto off = v.find("data_offsets");
      if (dt == v.end() || sh == v.end() || off == v.end()) {
        bad("missing \"dtype\", \"shape\" or \"data_offsets\"");
      }
      if (!dt->is_string()) bad("\"dtype\" is not a string");
      if (!sh->is_array()) bad("\"shape\" is not an array");
      if (!off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
          !(*off)[1].is_number_unsigned()) {
        bad("\"data_offsets\" is not two non-negative integers");
      }
      Entry e;
      e.name = name;
      e.begin = (*off)[0].get<std::uint64_t>();
      e.end = (*off)[1].get<std::uint64_t>();
      if (e.begin > e.end || e.end > data_bytes) {
        bad(str_cat("data_offsets [", e.begin, ", ", e.end, "] outside the ", data_bytes,
                    " bytes of data"));
      }
      std::uint64_t count = 1;
      for (const auto& d : *sh) {
        if (!d.is_number_unsigned()) bad("a dimension is not a non-negative integer");
        const auto dim = d.get<std::uint64_t>();
        if (dim > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ||
            (dim != 0 && count > std::numeric_limits<std::uint64_t>::max() / dim)) {
          bad("its element count overflows");
        }
        count *= dim;
        e.shape.push_back(static_cast<std::int64_t>(dim));
      }
      const std::string dtype = dt->get<std::string>();
      const std::optional<DType> kd = dtype_of(dtype);
      if (!kd) {
        unsupported.emplace_back(name, dtype);
        continue;
      }
      e.dtype = *kd;
      const std::uint64_t size = size_of(e.dtype);
      if (count > std::numeric_limits<std::uint64_t>::max() / size ||
          count * size != e.end - e.begin) {
        bad(str_cat("a ", to_string(e.shape), " ", dtype, " tensor needs ", count * size,
                    " bytes, data_offsets give ", e.end - e.begin));
      }
      entries_.push_back(std::move(e));
    }
    std::sort(entries_.begin(), entries_.end(),
              [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
    for (std::size_t i = 1; i < entries_.size(); ++i) {
      if (entries_[i].begin < entries_[i - 1].end) {
        fail(str_cat("tensors \"", entries_[i - 1].name, "\" and \"", entries_[i].name,
                     "\" overlap"));
      }
    }
  }

  std::string ctx_;
  File file_;
  std::uint64_t size_ = 0;
  std::uint64_t header_bytes_ = 0;
  std::vector<Entry> entries_;
};

std::string supported_list() {
  std::string s;
  for (const SafeDType& d : kDTypes) s += str_cat(s.empty() ? "" : ", ", d.name);
  return s;
}

// The bytes of an array (any device).
const void* bytes_of_any(const Array& a, std::vector<char>& staging) {
  Buffer& buffer = *a.buffer();
  if (const void* p = buffer.host_data()) return p;
  staging.resize(buffer.nbytes());
  buffer.read(staging.data());
  return staging.data();
}

// A float array of the host as another float dtype (load_weights'
// convert_floats): through double, rounding to nearest even (runtime/half.hpp
// for the 16-bit ones).
Array convert_floats(const Array& a, DType to) {
  std::vector<char> staging;
  const void* src = bytes_of_any(a, staging);
  const auto n = static_cast<std::size_t>(numel(a.shape()));
  auto buf = HostBuffer::allocate(n * size_of(to));
  const auto load = [&](std::size_t i) -> double {
    switch (a.dtype()) {
      case DType::kF16: return half_to_float(static_cast<const std::uint16_t*>(src)[i]);
      case DType::kBF16: return bf16_to_float(static_cast<const std::uint16_t*>(src)[i]);
      case DType::kF32: return static_cast<const float*>(src)[i];
      default: return static_cast<const double*>(src)[i];
    }
  };
  void* dst = buf->host_data();
  for (std::size_t i = 0; i < n; ++i) {
    const double v = load(i);
    switch (to) {
      case DType::kF16: static_cast<std::uint16_t*>(dst)[i] = float_to_half(static_cast<float>(v)); break;
      case DType::kBF16: static_cast<std::uint16_t*>(dst)[i] = float_to_bf16(static_cast<float>(v)); break;
      case DType::kF32: static_cast<float*>(dst)[i] = static_cast<float>(v); break;
      default: static_cast<double*>(dst)[i] = v; break;
    }
  }
  return Array(to, a.shape(), std::move(buf));
}


}  // namespace

NamedArrays read_safetensors(const std::filesystem::path& path, const ReadWeightsOptions& options) {
  SafetensorsReader reader(path);
  for (const auto& [name, dtype] : reader.unsupported) {
    if (options.skip_unsupported_dtypes || (options.select && !options.select(name))) continue;
    reader.fail(str_cat("tensor \"", name, "\" has dtype ", dtype, ", which kiln does not have (it reads ",
                        supported_list(), "; skip_unsupported_dtypes leaves such tensors out)"));
  }
  NamedArrays out;
  for (const Entry& e : reader.entries()) {
    if (options.select && !options.select(e.name)) continue;
    out.push_back({e.name, reader.read(e)});
  }
  return out;
}

void write_safetensors(const std::filesystem::path& path, const NamedArrays& arrays,
                       const std::map<std::string, std::string>& metadata) {
  const std::string ctx = str_cat("[write_safetensors] ", path.string());
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> names;
  std::uint64_t offset = 0;
  for (const NamedArray& n : arrays) {
    if (n.name == "__metadata__") throw ValueError(str_cat(ctx, ": the name __metadata__ is reserved"));
    if (!names.insert(n.name).second) {
      throw ValueError(str_cat(ctx, ": two arrays are named \"", n.name, "\""));
    }
    if (n.array.is_null()) throw ValueError(str_cat(ctx, ": \"", n.name, "\" is None"));
    if (n.array.buffer() == nullptr) {
      throw ValueError(str_cat(ctx, ": \"", n.name, "\" is a tracer (inside grad or jit); write concrete arrays"));
    }
    std::vector<std::int64_t> shape(n.array.shape().begin(), n.array.shape().end());
    const std::uint64_t nbytes = n.array.nbytes();
    header[n.name] = {{"dtype", name_of(n.array.dtype())},
                      {"shape", shape},
                      {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data 8-byte aligned
  detail::write_atomically(path, ctx, [&](const std::string& temp) {
    File f(std::fopen(temp.c_str(), "wb"));
    if (f == nullptr) throw CheckpointError(str_cat(ctx, ": cannot create ", temp, ": ", std::strerror(errno)));
    unsigned char prefix[8];
    for (int i = 0; i < 8; ++i) prefix[i] = static_cast<unsigned char>(text.size() >> (8 * i));
    bool ok = std::fwrite(prefix, 1, 8, f.get()) == 8 &&
              std::fwrite(text.data(), 1, text.size(), f.get()) == text.size();
    std::vector<char> staging;
    for (const NamedArray& n : arrays) {
      if (!ok) break;
      const std::size_t nbytes = n.array.nbytes();
      ok = nbytes == 0 || std::fwrite(bytes_of_any(n.array, staging), 1, nbytes, f.get()) == nbytes;
    }
    if (!ok || std::fflush(f.get()) != 0) {
      throw CheckpointError(str_cat(ctx, ": writing failed (", std::strerror(errno), ")"));
    }
  });
}

NamedArrays read_npz(const std::filesystem::path& path, const ReadWeightsOptions& options) {
  NamedArrays out;
  for (auto& [name, a] : detail::ckpt::read_npz(path, options.select, options.skip_unsupported_dtypes)) {
    out.push_back({std::move(name), std::move(a)});
  }
  return out;
}

namespace detail {

std::vector<Array> load_weights_flat(const NamedArrays& file, const TreeDef& def,
                                     std::span<const Array> like_leaves,
                                     const LoadWeightsOptions& options) {
  std::unordered_map<std::string_view, const NamedArray*> by_name;
  for (const NamedArray& n : file) by_name.emplace(n.name, &n);
  const std::vector<std::string> paths = tree::paths(def);
  std::vector<std::string> diffs;
  std::set<std::string_view> used;
  std::vector<Array> out;
  out.reserve(like_leaves.size());
  for (std::size_t i = 0; i < like_leaves.size(); ++i) {
    const Array& like = like_leaves[i];
    const std::string shown = tree::display_path(paths[i]);
    const std::string name = options.name ? options.name(paths[i]) : paths[i];
    const auto it = by_name.find(name);
    if (it == by_name.end()) {
      diffs.push_back(str_cat(shown, ": no array named \"", name, "\" in the file"));
      out.emplace_back();
      continue;
    }
    used.insert(it->second->name);
    Array a = it->second->array;
    if (a.shape() != like.shape()) {
      diffs.push_back(str_cat(shown, ": shape ", to_string(a.shape()), " in file (\"", name,
                              "\"), ", to_string(like.shape()), " in template"));
    } else if (a.dtype() != like.dtype() &&
               !(options.convert_floats && is_inexact(a.dtype()) && is_inexact(like.dtype()))) {
      diffs.push_back(str_cat(shown, ": dtype ", kiln::name(a.dtype()), " in file (\"", name,
                              "\"), ", kiln::name(like.dtype()), " in template",
                              is_inexact(a.dtype()) && is_inexact(like.dtype())
                                  ? " (convert_floats converts)"
                                  : ""));
    }
    out.push_back(std::move(a));
  }
  if (!options.allow_unused) {
    for (const NamedArray& n : file) {
      if (!used.contains(n.name)) {
        diffs.push_back(str_cat("\"", n.name, "\" in the file: no leaf takes it (allow_unused ignores it)"));
      }
    }
  }
  if (diffs.size() == 1) throw TreeError(str_cat("[load_weights] ", diffs[0]));
  if (!diffs.empty()) {
    throw TreeError(str_cat("[load_weights] the weights do not fit the template (", diffs.size(),
                            " differences):\n  ", join(diffs, "\n  ")));
  }
  // Converted and moved to each leaf's device.
  for (std::size_t i = 0; i < out.size(); ++i) {
    const Array& like = like_leaves[i];
    if (out[i].dtype() != like.dtype()) out[i] = convert_floats(out[i], like.dtype());
    if (like.device() != out[i].device()) out[i] = to_device(out[i], like.device());
  }
  return out;
}

NamedArrays named_arrays_flat(const TreeDef& def, std::span<const Array> leaves) {
  const std::vector<std::string> paths = tree::paths(def);
  NamedArrays out;
  out.reserve(leaves.size());
  for (std::size_t i = 0; i < leaves.size(); ++i) out.push_back({paths[i], leaves[i]});
  return out;
}

}  // namespace detail
}  // namespace kiln
