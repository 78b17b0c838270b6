// TreeMatcher: the allocation-free check of a jit cache hit. It receives the
// same pre-order walk as DefBuilder (detail::flatten_into) and compares each
// record with an expected TreeDef and each array leaf's aval with the expected
// one, collecting pointers to the leaves; static leaves are compared with ==
// in place (StaticValue::equals_value), never copied.
#pragma once

#include <span>
#include <vector>

#include "kiln/runtime/tree.hpp"

namespace kiln::detail {

class TreeMatcher {
 public:
  // Leaves must also be concrete, not donated, and on `device`.
  TreeMatcher(const TreeDef& def, std::span<const Aval> avals, Device device,
              std::vector<const Array*>& leaves)
      : d_(def.data()), avals_(avals), device_(device), leaves_(leaves) {}

  std::size_t open(NodeKind kind, std::size_t arity, const NodeInfo* info = nullptr) {
    const DefNode* n = next();
    ok_ = n != nullptr && n->kind == kind && n->arity == arity && same_type(n->info, info);
    return 0;
  }
  void close(std::size_t) {}
  void key(const std::string& k) {
    ok_ = ok_ && key_ < d_.keys.size() && d_.keys[key_++] == k;
  }
  [[gnu::always_inline]] void array(const Array& a) {
    const DefNode* n = next();
    if (n == nullptr) return;
    const ArrayImpl* impl = a.impl();
    if (impl == nullptr) {
      ok_ = n->kind == NodeKind::kNone;
      return;
    }
    ok_ = n->kind == NodeKind::kArray && leaf_ < avals_.size() &&
          same_aval(impl->aval, avals_[leaf_]) && impl->trace_id == 0 && !impl->donated &&
          impl->device == device_;
    ++leaf_;
    leaves_.push_back(&a);
  }
  template <class T>
  void static_value(const T& v) {
    const DefNode* n = next();
    ok_ = n != nullptr && n->kind == NodeKind::kStatic && d_.statics[n->aux].equals_value(v);
  }
  void static_leaf(const StaticValue& v) {
    const DefNode* n = next();
    ok_ = n != nullptr && n->kind == NodeKind::kStatic && d_.statics[n->aux] == v;
  }
  void tree(const Tree&) { ok_ = false; }  // dynamic trees take the slow path

  bool matched() const {
    return ok_ && node_ == d_.nodes.size() && leaf_ == avals_.size();
  }

 private:
  static bool same_aval(const Aval& a, const Aval& b) {
    if (a.dtype != b.dtype || a.shape.size() != b.shape.size()) return false;
    for (std::size_t i = 0; i < a.shape.size(); ++i) {
      if (a.shape[i] != b.shape[i]) return false;
    }
    return true;
  }
  const DefNode* next() {
    if (!ok_ || node_ >= d_.nodes.size()) {
      ok_ = false;
      return nullptr;
    }
    return &d_.nodes[node_++];
  }

  const TreeDefData& d_;
  std::span<const Aval> avals_;
  Device device_;
  std::vector<const Array*>& leaves_;
  bool ok_ = true;
  std::size_t node_ = 0;
  std::size_t key_ = 0;
  std::size_t leaf_ = 0;
};

// True when `v` has exactly the structure, statics and leaf avals given, with
// concrete leaves on `device`;
// appends pointers to its array leaves to `leaves` (also when it does not match).
template <class T>
bool matches(const T& v, const TreeDef& def, std::span<const Aval> avals, Device device,
             std::vector<const Array*>& leaves) {
  TreeMatcher m(def, avals, device, leaves);
  flatten_into<T, TreeMatcher>(v, m);
  return m.matched();
}

}  // namespace kiln::detail
