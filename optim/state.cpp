// optim::State in checkpoints: its per-parameter buffers named by parameter
// path (State::kiln_member_paths), from the slot paths of the gradient
// structure that update indexes the buffers by (array_slot_paths).
#include "kiln/optim/state.hpp"

#include <charconv>
#include <string_view>

#include "kiln/optim/stage_math.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::optim {
namespace detail {

Paths array_slot_paths(const TreeDef& def) {
  Paths out;
  for (const SlotPath& s : tree::slot_paths(def)) {
    if (s.kind != NodeKind::kStatic) out.push_back(s.path);
  }
  return out;
}

}  // namespace detail

namespace {

// Consumes `prefix` from the front of `s`.
bool eat(std::string_view& s, std::string_view prefix) {
  if (!s.starts_with(prefix)) return false;
  s.remove_prefix(prefix.size());
  return true;
}

// Consumes a decimal number from the front of `s`.
bool eat_index(std::string_view& s, std::size_t& out) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (ec != std::errc() || end == s.data()) return false;
  s.remove_prefix(static_cast<std::size_t>(end - s.data()));
  return true;
}

// Whether stages[i].<key> reads as a field and collides with no StageState
// field (whose arrays keep their paths).
bool plain_key(std::string_view key) {
  if (key.empty() || (key[0] >= '0' && key[0] <= '9')) return false;
  for (char c : key) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '_';
    if (!ok) return false;
  }
  return key != "kind" && key != "leaves" && key != "scalars";
}

}  // namespace

void State::kiln_member_paths(std::span<const StaticValue> statics,
                              std::span<std::string> paths) {
  // statics[0] is gradient_structure (the first field; the stages' kinds
  // follow).
  const TreeDef* def = statics.empty() ? nullptr : statics[0].get_if<TreeDef>();
  if (def == nullptr) return;
  const detail::Paths params = detail::array_slot_paths(*def);
  for (std::string& path : paths) {
    // stages[<s>].leaves["<key>"][<slot>]
    std::string_view rest = path;
    std::size_t stage = 0, slot = 0;
    if (!eat(rest, "stages[") || !eat_index(rest, stage) ||
        !eat(rest, "].leaves[\"")) {
      continue;
    }
    const std::size_t open = rest.rfind("\"][");
    if (open == std::string_view::npos) continue;
    const std::string_view key = rest.substr(0, open);
    rest.remove_prefix(open + 3);
    if (!eat_index(rest, slot) || rest != "]" || slot >= params.size()) {
      continue;
    }
    const std::string buffer =
        plain_key(key) ? kiln::detail::str_cat("stages[", stage, "].", key)
                       : kiln::detail::str_cat("stages[", stage, "].leaves[\"",
                                               key, "\"]");
    path = tree::join_path(buffer, params[slot]);
  }
}

}  // namespace kiln::optim
