// dist::options_from_env: the KILN_RANK / KILN_WORLD_SIZE / KILN_DIST_*
// variables a launcher sets for each rank.
#include <cmath>
#include <optional>
#include <string>

#include "kiln/dist/dist.hpp"
#include "kiln/runtime/env.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::dist {

using kiln::detail::str_cat;
namespace {

std::optional<std::string> env(const char* name) { return kiln::detail::env::text(name); }

}  // namespace

Options options_from_env() {
  Options o;
  // Parsed strictly by kiln's one table of variables (runtime/env.cpp).
  namespace env_var = kiln::detail::env;
  const auto world = env_var::count("KILN_WORLD_SIZE");
  const auto rank = env_var::count("KILN_RANK");
  if (world) o.world_size = static_cast<int>(*world);
  if (rank) o.rank = static_cast<int>(*rank);
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
  if (const auto s = env_var::number("KILN_DIST_TIMEOUT")) {
    o.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(*s * 1000.0)));
  }
  if (const auto mb = env_var::number("KILN_DIST_BUCKET_MB")) {
    o.bucket_bytes = static_cast<std::size_t>(*mb * 1024.0 * 1024.0);
  }
  return o;
}

}  // namespace kiln::dist
