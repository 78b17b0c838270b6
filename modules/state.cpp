// nn::State: keyed arrays whose structure is fixed at construction (state.hpp).
#include "kiln/modules/state.hpp"

#include "kiln/runtime/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::nn {

using kiln::detail::str_cat;

namespace {

std::string key_of(const StateIndex& index, std::string_view field) {
  return str_cat(index.name, ".", field);
}

bool has_prefix(const std::map<std::string, Array>& entries, const std::string& prefix) {
  const auto it = entries.lower_bound(prefix);
  return it != entries.end() && it->first.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace

StateIndex State::add(std::string_view kind,
                      const std::vector<std::pair<std::string, Array>>& fields,
                      std::string_view name) {
  StateIndex index{std::string(name)};
  if (index.name.empty()) {
    for (int n = 0;; ++n) {
      index.name = str_cat(kind, "_", n);
      if (!has_prefix(entries, index.name + ".")) break;
    }
  } else if (has_prefix(entries, index.name + ".")) {
    throw ValueError(str_cat("[nn.State] the state already has entries named ", index.name,
                             "; give each stateful layer its own name"));
  }
  for (const auto& [field, value] : fields) entries[key_of(index, field)] = value;
  return index;
}

const Array& State::get(const StateIndex& index, std::string_view field,
                        std::string_view layer) const {
  const auto it = entries.find(key_of(index, field));
  if (it == entries.end()) {
    throw ValueError(str_cat("[", layer, "] the state has no entry ", key_of(index, field),
                             " (was the layer built with this nn::State?)"));
  }
  return it->second;
}

State State::set(const StateIndex& index, const std::vector<std::pair<std::string, Array>>& fields,
                 std::string_view layer) const {
  State out = *this;
  for (const auto& [field, value] : fields) {
    const Array& old = get(index, field, layer);
    if (value.is_null() || value.dtype() != old.dtype() || value.shape() != old.shape()) {
      throw ShapeError(str_cat("[", layer, "] new state ", key_of(index, field), " is ",
                               value.is_null()
                                   ? std::string("None")
                                   : str_cat(name(value.dtype()), to_string(value.shape())),
                               ", expected ", name(old.dtype()), to_string(old.shape()),
                               " (a state keeps the structure it was built with)"));
    }
    out.entries[key_of(index, field)] = value;
  }
  return out;
}

}  // namespace kiln::nn
