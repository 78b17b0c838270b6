// The KILN_* variables and their strict parsing: see env.hpp.
#include "kiln/runtime/env.hpp"

#include <array>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::detail::env {
namespace {

constexpr std::uint64_t kMax = ~std::uint64_t{0};
constexpr std::string_view kFusion[] = {"0", "1", "elementwise", "anchors"};
constexpr std::string_view kIsa[] = {"generic", "x86-64-v2", "x86-64-v3", "x86-64-v4"};
constexpr std::string_view kGemm[] = {"kiln", "openblas", "onednn"};

constexpr Spec kTable[] = {
    {"KILN_DEVICE", Kind::kText},  // cpu, vulkan, vulkan:N (runtime/device.cpp)
    {"KILN_CPU_ISA", Kind::kChoice, 0, 0, kIsa},
    {"KILN_CPU_JIT", Kind::kFlag},
    {"KILN_GEMM", Kind::kChoice, 0, 0, kGemm},
    {"KILN_NUM_THREADS", Kind::kCount, 1, 4096},
    {"KILN_VALIDATION", Kind::kFlag},
    {"KILN_VK_PRINT_KERNELS", Kind::kFlag},
    {"KILN_VK_DISABLE_F16", Kind::kFlag},
    {"KILN_VK_DISABLE_BF16", Kind::kFlag},
    {"KILN_VK_DISABLE_F64", Kind::kFlag},
    {"KILN_VK_DISABLE_PUSH_DESCRIPTOR", Kind::kFlag},
    {"KILN_VK_FORCE_STAGING", Kind::kFlag},
    {"KILN_VK_OPTIMIZE", Kind::kFlag},
    {"KILN_VK_MATMUL_SHARED", Kind::kFlag},
    {"KILN_VK_DISABLE_BUFFER_ADDRESS", Kind::kFlag},
    {"KILN_VK_MAX_STORAGE_BUFFER_RANGE", Kind::kCount, 256, kMax},
    {"KILN_VK_DISABLE_TEXEL_LOADS", Kind::kFlag},
    {"KILN_VK_DISABLE_COOPMAT", Kind::kFlag},
    {"KILN_VK_MAP_GROUP_CAP", Kind::kCount, 1, 0xffffffffu},
    {"KILN_VK_PARALLEL_INVOCATIONS", Kind::kCount, 1, 0xffffffffu},
    {"KILN_VK_SYNC_INDEX_CHECKS", Kind::kFlag},
    {"KILN_VK_MAX_GROUP_COUNT", Kind::kCount, 1, 0xffffffffu},
    {"KILN_VK_CHECK_KEYS", Kind::kFlag},
    {"KILN_VK_PROFILE", Kind::kText},  // 1: kernel times to stderr at exit; else a JSON file
    {"KILN_CACHE_DIR", Kind::kText},
    {"KILN_DISK_CACHE", Kind::kFlag},
    {"KILN_WHILE_MAX_BATCH", Kind::kCount, 1, 1u << 20},
    {"KILN_LOG_RETRACES", Kind::kFlag},
    {"KILN_JIT_CACHE_LIMIT", Kind::kCount, 1, 1u << 30},
    {"KILN_VK_MAX_PIPELINES", Kind::kCount, 64, 1u << 30},
    {"KILN_PRINT_PROGRAMS", Kind::kFlag},
    {"KILN_FUSION", Kind::kChoice, 0, 0, kFusion},
    {"KILN_INPLACE", Kind::kFlag},
    {"KILN_HOST_CACHE", Kind::kFlag},
    {"KILN_RANK", Kind::kCount, 0, 1u << 20},
    {"KILN_WORLD_SIZE", Kind::kCount, 1, 1u << 20},
    {"KILN_DIST_STORE", Kind::kText},
    {"KILN_DIST_ADDR", Kind::kText},
    {"KILN_DIST_HOST", Kind::kText},
    {"KILN_DIST_TIMEOUT", Kind::kNumber},
    {"KILN_DIST_BUCKET_MB", Kind::kNumber},
    {"KILN_DIST_RUN_ID", Kind::kText},
};

// The value, when set and not empty.
std::optional<std::string> raw(const Spec& s) {
  const std::string name(s.name);
  const char* v = std::getenv(name.c_str());
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

[[noreturn]] void bad(const Spec& s, std::string_view value, std::string_view takes) {
  throw ValueError(str_cat("[environment] ", s.name, "=\"", value, "\" is not ", takes,
                           " (unset it for the default; README, \"Devices and environment\")"));
}

const Spec& expect(std::string_view name, Kind kind) {
  const Spec& s = spec(name);
  if (s.kind != kind) {
    throw std::logic_error(str_cat("kiln reads ", name, " as another kind than its table entry"));
  }
  return s;
}

std::string choices_text(const Spec& s) {
  std::string out = "one of ";
  for (std::size_t i = 0; i < s.choices.size(); ++i) {
    out += i == 0 ? "" : i + 1 == s.choices.size() ? " or " : ", ";
    out += s.choices[i];
  }
  return out;
}

}  // namespace

std::span<const Spec> all() { return kTable; }

const Spec& spec(std::string_view name) {
  for (const Spec& s : kTable) {
    if (s.name == name) return s;
  }
  throw std::logic_error(str_cat("kiln reads ", name, ", which runtime/env.cpp does not list"));
}

std::optional<bool> flag(std::string_view name) {
  const Spec& s = expect(name, Kind::kFlag);
  const std::optional<std::string> v = raw(s);
  if (!v) return std::nullopt;
  if (*v == "0") return false;
  if (*v == "1") return true;
  bad(s, *v, "0 or 1");
}

std::optional<std::uint64_t> count(std::string_view name) {
  const Spec& s = expect(name, Kind::kCount);
  const std::optional<std::string> v = raw(s);
  if (!v) return std::nullopt;
  std::uint64_t n = 0;
  const char* end = v->data() + v->size();
  const auto [ptr, ec] = std::from_chars(v->data(), end, n);
  if (ec != std::errc() || ptr != end || n < s.min || n > s.max) {
    bad(s, *v, s.max == kMax ? str_cat("a whole number of at least ", s.min)
                             : str_cat("a whole number from ", s.min, " to ", s.max));
  }
  return n;
}

std::optional<double> number(std::string_view name) {
  const Spec& s = expect(name, Kind::kNumber);
  const std::optional<std::string> v = raw(s);
  if (!v) return std::nullopt;
  char* end = nullptr;
  const double d = std::strtod(v->c_str(), &end);
  if (end != v->c_str() + v->size() || !std::isfinite(d) || d <= 0) {
    bad(s, *v, "a positive number");
  }
  return d;
}

std::optional<std::string> choice(std::string_view name) {
  const Spec& s = expect(name, Kind::kChoice);
  const std::optional<std::string> v = raw(s);
  if (!v) return std::nullopt;
  for (std::string_view c : s.choices) {
    if (*v == c) return v;
  }
  bad(s, *v, choices_text(s));
}

std::optional<std::string> text(std::string_view name) { return raw(expect(name, Kind::kText)); }

void check(std::string_view name) {
  switch (spec(name).kind) {
    case Kind::kFlag:
      (void)flag(name);
      return;
    case Kind::kCount:
      (void)count(name);
      return;
    case Kind::kNumber:
      (void)number(name);
      return;
    case Kind::kChoice:
      (void)choice(name);
      return;
    case Kind::kText:
      (void)text(name);
      return;
  }
}

}  // namespace kiln::detail::env
