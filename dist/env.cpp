// dist::options_from_env: the KILN_RANK / KILN_WORLD_SIZE / KILN_DIST_*
// variables a launcher sets for each rank.
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>

#include "absl/strings/numbers.h"
#include "kiln/dist/dist.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::dist {

using kiln::detail::str_cat;
namespace {

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

[[noreturn]] void bad(const char* name, const std::string& value, const char* what) {
  throw ValueError(str_cat("[dist.init] ", name, "=", value, " is not ", what));
}

int int_var(const char* name, const std::string& value) {
  int v = 0;
  if (!absl::SimpleAtoi(value, &v)) bad(name, value, "an integer");
  return v;
}

double positive_var(const char* name, const std::string& value) {
  double v = 0;
  if (!absl::SimpleAtod(value, &v) || !std::isfinite(v) || v <= 0) {
    bad(name, value, "a positive number");
  }
  return v;
}

}  // namespace

Options options_from_env() {
  Options o;
  const auto world = env("KILN_WORLD_SIZE");
  const auto rank = env("KILN_RANK");
  if (world) o.world_size = int_var("KILN_WORLD_SIZE", *world);
  if (rank) o.rank = int_var("KILN_RANK", *rank);
  if (rank && !world) {
    throw ValueError(
        str_cat("[dist.init] KILN_RANK=", *rank, " is set but KILN_WORLD_SIZE is not"));
  }
  if (world && o.world_size > 1 && !rank) {
    throw ValueError(
        str_cat("[dist.init] KILN_WORLD_SIZE=", *world, " is set but KILN_RANK is not"));
  }
  if (auto v = env("KILN_DIST_STORE")) o.store_path = *v;
  if (auto v = env("KILN_DIST_ADDR")) o.store_address = *v;
  if (auto v = env("KILN_DIST_RUN_ID")) o.run_id = *v;
  if (auto v = env("KILN_DIST_HOST")) o.host = *v;
  if (auto v = env("KILN_DIST_TIMEOUT")) {
    const double s = positive_var("KILN_DIST_TIMEOUT", *v);
    o.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(s * 1000.0)));
  }
  if (auto v = env("KILN_DIST_BUCKET_MB")) {
    const double mb = positive_var("KILN_DIST_BUCKET_MB", *v);
    o.bucket_bytes = static_cast<std::size_t>(mb * 1024.0 * 1024.0);
  }
  return o;
}

}  // namespace kiln::dist
