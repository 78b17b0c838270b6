// Control: KILN_MODULE classes with constructors, private fields, a virtual
// function, fields registered out of declaration order, an empty base, and a
// field marked KILN_NOT_IN_TREE all compile (the size check has no false positives there).
// expect: compiles
#include <cstdint>
#include <kiln/kiln.hpp>
#include <string>

namespace {
class Padded {
 public:
  Padded() = default;
  explicit Padded(kiln::Array w) : w_(std::move(w)) {}

 private:
  char tag_ = 0;
  kiln::Array w_;
  std::int16_t small_ = 0;
  double scale_ = 1.0;
  char flag_ = 0;

 public:
  // Registered in another order than declared: padding differs, still whole.
  KILN_MODULE(Padded, scale_, w_, flag_, small_, tag_);
};

struct Virtual {
  Virtual() = default;
  virtual ~Virtual() = default;
  Virtual(const Virtual&) = default;
  Virtual& operator=(const Virtual&) = default;
  kiln::Array w;
  KILN_MODULE(Virtual, w);
};

class WithCache {
 public:
  WithCache() = default;
  explicit WithCache(kiln::Array w) : w(std::move(w)) {}
  kiln::Array w;
  std::string cache;  // deliberately not part of the tree
  KILN_MODULE(WithCache, w);
  KILN_NOT_IN_TREE(cache);
};

struct Mixin {
  int doubled(int x) const { return 2 * x; }
};
struct WithEmptyBase : Mixin {
  kiln::Array w;
  int width = 3;
  KILN_MODULE(WithEmptyBase, w, width);
};

struct AggregateWithCache {
  kiln::Array w;
  int calls = 0;
  KILN_MODULE(AggregateWithCache, w);
  KILN_NOT_IN_TREE(calls);
};
}  // namespace

kiln::TreeDef a() { return kiln::tree::structure(Padded{}); }
kiln::TreeDef b() { return kiln::tree::structure(Virtual{}); }
kiln::TreeDef c() { return kiln::tree::structure(WithCache{}); }
kiln::TreeDef d() { return kiln::tree::structure(AggregateWithCache{}); }
kiln::TreeDef e() { return kiln::tree::structure(WithEmptyBase{}); }
