// Printing and checking of typed primitive parameters (dsl/params.hpp).
#include "kiln/dsl/params.hpp"

#include <bit>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/dsl/program.hpp"
#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln {
namespace detail {

void wrong_params(std::size_t held, std::size_t wanted) {
  throw Error(str_cat("[kiln internal] a binding holds parameter struct #", held,
                      " of ParamsVariant where #", wanted, " was expected"));
}

namespace {

std::string tuple(const auto& xs) { return str_cat("(", join(xs, ", "), ")"); }

// A nested program's text, its lines indented under the equation holding it.
std::string indent(const std::string& text) {
  std::string out;
  for (char c : text) {
    out += c;
    if (c == '\n') out += "    ";
  }
  return out;
}

template <class F>
std::string field_string(std::string_view name, const F& f) {
  if constexpr (std::is_same_v<F, bool>) {
    return f ? str_cat(name, "=true") : std::string();
  } else if constexpr (std::is_same_v<F, Shape> || std::is_same_v<F, Axes>) {
    return str_cat(name, "=", tuple(f));
  } else if constexpr (std::is_same_v<F, DType>) {
    return str_cat(name, "=", kiln::name(f));
  } else if constexpr (std::is_same_v<F, Device>) {
    return str_cat(name, "=", f.to_string());
  } else if constexpr (std::is_same_v<F, ProgramRef>) {
    return f == nullptr ? std::string() : str_cat(name, "=", indent(to_string(*f)));
  } else if constexpr (std::is_same_v<F, std::vector<ProgramRef>>) {
    std::vector<std::string> parts;
    for (const ProgramRef& b : f) parts.push_back(indent(to_string(*b)));
    return str_cat(name, "=(", join(parts, ",\n    "), ")");
  } else if constexpr (std::is_same_v<F, std::string>) {
    return f.empty() ? std::string() : str_cat(name, "=", f);
  } else {
    return str_cat(name, "=", f);
  }
}

}  // namespace
}  // namespace detail

std::string to_string(const Params& p) {
  std::vector<std::string> parts;
  std::visit(
      [&](const auto& q) {
        using T = std::remove_cvref_t<decltype(q)>;
        constexpr auto names = detail::field_names<T>();
        std::size_t i = 0;
        detail::for_each_field(q, [&](const auto& f) {
          std::string s = detail::field_string(names[i++], f);
          if (!s.empty()) parts.push_back(std::move(s));
        });
      },
      p.variant());
  return parts.empty() ? std::string() : "[" + detail::join(parts, " ") + "]";
}

std::string cache_key(const Params& p) {
  if (p.index() == 0) return {};  // NoParams: the elementwise kernels' keys stay short
  std::string key = detail::str_cat("#", p.index());
  std::visit(
      [&](const auto& q) {
        detail::for_each_field(q, [&](const auto& f) {
          using F = std::remove_cvref_t<decltype(f)>;
          if constexpr (std::is_same_v<F, Shape> || std::is_same_v<F, Axes>) {
            key += detail::str_cat("/(", detail::join(f, ","), ")");
          } else if constexpr (std::is_same_v<F, DType>) {
            key += detail::str_cat("/", kiln::name(f));
          } else if constexpr (std::is_same_v<F, Device>) {
            key += detail::str_cat("/", f.to_string());
          } else if constexpr (std::is_same_v<F, ProgramRef>) {
            key += detail::str_cat("/p", reinterpret_cast<std::uintptr_t>(f.get()));
          } else if constexpr (std::is_same_v<F, std::vector<ProgramRef>>) {
            for (const ProgramRef& b : f) {
              key += detail::str_cat("/p", reinterpret_cast<std::uintptr_t>(b.get()));
            }
            key += "/.";
          } else if constexpr (std::is_same_v<F, std::string>) {
            key += detail::str_cat("/", f.size(), ":", f);
          } else if constexpr (std::is_floating_point_v<F>) {
            key += detail::str_cat("/bits", std::bit_cast<std::uint64_t>(static_cast<double>(f)));
          } else {
            key += detail::str_cat("/", static_cast<std::int64_t>(f));
          }
        });
      },
      p.variant());
  return key;
}

const Device* creation_device(const Params& p) {
  if (const auto* q = std::get_if<FullParams>(&p.variant())) return &q->device;
  if (const auto* q = std::get_if<ArangeParams>(&p.variant())) return &q->device;
  return nullptr;
}

bool operator==(const Params& a, const Params& b) {
  if (a.v_.index() != b.v_.index()) return false;
  return std::visit(
      [&](const auto& x) {
        using T = std::remove_cvref_t<decltype(x)>;
        const T& y = std::get<T>(b.v_);
        constexpr std::size_t n = detail::kFieldCount<T>;
        return detail::with_fields<n>(x, [&](auto, const auto&... fx) {
          return detail::with_fields<n>(y, [&](auto, const auto&... fy) {
            return ((detail::param_key(fx) == detail::param_key(fy)) && ...);
          });
        });
      },
      a.v_);
}

}  // namespace kiln
