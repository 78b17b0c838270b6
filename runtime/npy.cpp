// .npy headers: see npy.hpp (and why not xtensor's xnpy.hpp).
#include "kiln/runtime/npy.hpp"

#include <optional>

#include <cstdint>
#include <limits>

#include "kiln/runtime/checkpoint.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::detail::npy {
namespace {

constexpr std::string_view kMagic = "\x93NUMPY";

[[noreturn]] void fail(std::string_view context, std::string_view what) {
  throw CheckpointError(str_cat(context, ": ", what));
}

// A cursor over the header dict, a Python literal such as
// {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
class DictParser {
 public:
  DictParser(std::string_view text, std::string_view context)
      : s_(text), context_(context) {}

  // The dict's fields, the descr not yet mapped to a dtype.
  struct Raw {
    std::string descr;
    Shape shape;
  };

  Raw parse() {
    bool have_descr = false, have_order = false, have_shape = false;
    Raw h;
    expect('{');
    while (!peek('}')) {
      const std::string key = string();
      expect(':');
      if (key == "descr") {
        h.descr = string();
        have_descr = true;
      } else if (key == "fortran_order") {
        fortran_ = boolean();
        have_order = true;
      } else if (key == "shape") {
        h.shape = shape();
        have_shape = true;
      } else {
        fail(context_, str_cat("bad npy header: unexpected key '", key, "'"));
      }
      if (!peek('}')) expect(',');
    }
    expect('}');
    skip_space();
    if (pos_ != s_.size()) bad("text after the dict");
    if (!have_descr || !have_order || !have_shape) {
      bad("missing 'descr', 'fortran_order' or 'shape'");
    }
    if (fortran_ && h.shape.size() > 1) {
      fail(context_, "Fortran-order arrays are not supported");
    }
    return h;
  }

  [[noreturn]] void bad(std::string_view what) {
    fail(context_, str_cat("bad npy header: ", what));
  }
  void check_size(const Shape& shape, std::size_t element_bytes) {
    if (const ShapeSize size = shape_size(shape, element_bytes); !size.ok()) {
      bad(size.error);
    }
  }

 private:
  void skip_space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' ||
                                s_[pos_] == '\t' || s_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool peek(char c) {
    skip_space();
    return pos_ < s_.size() && s_[pos_] == c;
  }
  void expect(char c) {
    if (!peek(c)) bad(str_cat("expected '", c, "' at offset ", pos_));
    ++pos_;
  }
  std::string string() {
    skip_space();
    if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"')) {
      bad(str_cat("expected a string at offset ", pos_));
    }
    const char quote = s_[pos_++];
    const std::size_t end = s_.find(quote, pos_);
    if (end == std::string_view::npos) bad("unterminated string");
    std::string out(s_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return out;
  }
  bool boolean() {
    skip_space();
    for (auto [word, value] : {std::pair{std::string_view("True"), true},
                               std::pair{std::string_view("False"), false}}) {
      if (s_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        return value;
      }
    }
    bad("fortran_order must be True or False");
  }
  Shape shape() {
    expect('(');
    Shape out;
    while (!peek(')')) {
      skip_space();
      std::int64_t dim = 0;
      std::size_t digits = 0;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
        if (dim > (std::numeric_limits<std::int64_t>::max() - 9) / 10) {
          bad("dimension too large");
        }
        dim = dim * 10 + (s_[pos_++] - '0');
        ++digits;
      }
      if (digits == 0) bad(str_cat("expected a dimension at offset ", pos_));
      out.push_back(dim);
      if (out.size() > 64) bad("more than 64 dimensions");
      if (!peek(')')) expect(',');
    }
    expect(')');
    return out;
  }
  std::string_view s_;
  std::string_view context_;
  std::size_t pos_ = 0;
  bool fortran_ = false;
};

// '<u2' is bf16: numpy has no bfloat16, kiln has no u16, and a checkpoint's
// manifest names the dtype anyway (checkpoint_read.cpp compares the two).
std::optional<DType> known_dtype(const std::string& d) {
  for (DType t : {DType::kBool, DType::kI32, DType::kU32, DType::kF16,
                  DType::kF32, DType::kF64, DType::kBF16}) {
    if (d == descr(t)) return t;
  }
  return std::nullopt;
}

DType dtype_of_descr(const std::string& d, std::string_view context) {
  if (const std::optional<DType> t = known_dtype(d)) return *t;
  if (!d.empty() && d[0] == '>') {
    fail(context, str_cat("big-endian data ('", d, "') is not supported"));
  }
  fail(context, str_cat("unsupported dtype '", d,
                        "' (kiln reads |b1, <i4, <u4, <f2, <f4, <f8, and <u2 as bf16)"));
}

}  // namespace

std::string_view descr(DType d) {
  switch (d) {
    case DType::kBool:
      return "|b1";
    case DType::kI32:
      return "<i4";
    case DType::kU32:
      return "<u4";
    case DType::kF16:
      return "<f2";
    case DType::kF32:
      return "<f4";
    case DType::kF64:
      return "<f8";
    case DType::kBF16:
      return "<u2";  // the raw bits; see dtype_of_descr
  }
  return "?";
}

namespace {

std::string header_of(std::string_view descr, const Shape& shape) {
  std::string shape_text = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    shape_text += std::to_string(shape[i]);
    shape_text += shape.size() == 1 ? "," : (i + 1 < shape.size() ? ", " : "");
  }
  shape_text += ")";
  std::string dict =
      str_cat("{'descr': '", descr,
              "', 'fortran_order': False, 'shape': ", shape_text, ", }");
  // Magic (6) + version (2) + length (2), then the dict padded with spaces and
  // ended by '\n' to a multiple of 64 bytes, as numpy writes it.
  const std::size_t unpadded = 10 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  std::string out(kMagic);
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>((dict.size() >> 8) & 0xff);
  return out + dict;
}

}  // namespace

std::string make_header(DType dtype, const Shape& shape) {
  return header_of(descr(dtype), shape);
}

std::string make_bytes_header(std::size_t n) {
  return header_of(kBytesDescr, {static_cast<std::int64_t>(n)});
}

std::size_t header_size(std::string_view prelude, std::string_view context) {
  if (prelude.size() < kPreludeBytes) fail(context, "npy data too short");
  if (prelude.substr(0, kMagic.size()) != kMagic) {
    fail(context, "not npy data (bad magic)");
  }
  const auto byte = [&](std::size_t i) {
    return static_cast<std::size_t>(static_cast<unsigned char>(prelude[i]));
  };
  const std::size_t major = byte(6);
  std::size_t total = 0;
  if (major == 1) {
    total = 10 + (byte(8) | byte(9) << 8);
  } else if (major == 2 || major == 3) {
    total = 12 + (byte(8) | byte(9) << 8 | byte(10) << 16 | byte(11) << 24);
  } else {
    fail(context, str_cat("unsupported npy version ", major, ".", byte(7)));
  }
  if (total > kMaxHeaderBytes) {
    fail(context, str_cat("npy header of ", total, " bytes is too long"));
  }
  return total;
}

namespace {

// The dict of a whole header (as long as header_size said).
DictParser dict_of(std::string_view header, std::string_view context) {
  const std::size_t total = header_size(header, context);
  if (header.size() != total) fail(context, "npy header truncated");
  const std::size_t start = header[6] == '\x01' ? 10 : 12;
  return DictParser(header.substr(start), context);
}

}  // namespace

Header parse_header(std::string_view header, std::string_view context) {
  DictParser parser = dict_of(header, context);
  DictParser::Raw raw = parser.parse();
  Header h{dtype_of_descr(raw.descr, context), std::move(raw.shape)};
  parser.check_size(h.shape, size_of(h.dtype));
  return h;
}

std::optional<Header> parse_header_if_known(std::string_view header, std::string_view context) {
  DictParser parser = dict_of(header, context);
  DictParser::Raw raw = parser.parse();
  const std::optional<DType> t = known_dtype(raw.descr);
  if (!t && (raw.descr.empty() || raw.descr[0] != '>')) return std::nullopt;
  Header h{dtype_of_descr(raw.descr, context), std::move(raw.shape)};
  parser.check_size(h.shape, size_of(h.dtype));
  return h;
}

std::uint64_t parse_bytes_header(std::string_view header,
                                 std::string_view context) {
  DictParser parser = dict_of(header, context);
  const DictParser::Raw raw = parser.parse();
  if (raw.descr != kBytesDescr || raw.shape.size() != 1) {
    parser.bad(str_cat("expected a 1-d ", kBytesDescr, " array, got '",
                       raw.descr, "' of shape ", to_string(raw.shape)));
  }
  parser.check_size(raw.shape, 1);
  return static_cast<std::uint64_t>(raw.shape[0]);
}

}  // namespace kiln::detail::npy
