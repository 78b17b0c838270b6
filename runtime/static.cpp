// StaticValue's out-of-line parts and the printing of static values: numbers in
// shortest round-trip form, and function pointers by symbol name (dladdr, then
// the object file's own symbol table for functions that are not exported, which
// is where an application's activations live) so that a retrace explanation can
// say "relu -> gelu" rather than two addresses.
#include "kiln/runtime/static.hpp"

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>
#include <vector>

#if defined(__has_include)
#if __has_include(<cxxabi.h>)
#include <cxxabi.h>
#define KILN_HAVE_CXXABI 1
#endif
#if __has_include( \
    <dlfcn.h>) && __has_include(<elf.h>) && __has_include(<sys/mman.h>)
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#define KILN_HAVE_ELF 1
#endif
#endif

namespace kiln {
namespace detail {

std::string demangle(const char* mangled) {
#ifdef KILN_HAVE_CXXABI
  int status = 0;
  char* out = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  if (status == 0 && out != nullptr) {
    std::string s(out);
    std::free(out);
    return s;
  }
#endif
  return mangled;
}

namespace {

void erase_all(std::string& s, std::string_view what) {
  for (std::size_t at = s.find(what); at != std::string::npos; at = s.find(what)) {
    s.erase(at, what.size());
  }
}

// "ns::relu(kiln::Array const&)" -> "ns::relu"; a lambda's static invoker
// "f()::{lambda(int)#1}::_FUN(int)" -> "f()::{lambda(int)#1}".
std::string strip_signature(std::string s) {
  if (!s.empty() && s.back() == ')') {
    int depth = 0;
    for (std::size_t i = s.size(); i-- > 0;) {
      if (s[i] == ')') ++depth;
      if (s[i] == '(' && --depth == 0) {
        s.resize(i);
        break;
      }
    }
  }
  // Activations often live in an anonymous namespace; the prefix is only noise.
  erase_all(s, "(anonymous namespace)::");
  constexpr std::string_view kInvoker = "::_FUN";
  if (s.size() > kInvoker.size() && s.ends_with(kInvoker)) {
    s.resize(s.size() - kInvoker.size());
  }
  return s;
}

std::string hex_address(std::uintptr_t address) {
  std::ostringstream os;
  os << "0x" << std::hex << address;
  return os.str();
}

#ifdef KILN_HAVE_ELF
struct FunctionSymbol {
  std::uint64_t start;
  std::uint64_t size;
  std::string name;
};

// FUNC symbols of an ELF file's .symtab (present unless the binary is
// stripped).
std::vector<FunctionSymbol> read_symtab(const char* path) {
  std::vector<FunctionSymbol> out;
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  struct stat st {};
  if (::fstat(fd, &st) != 0 ||
      st.st_size < static_cast<off_t>(sizeof(Elf64_Ehdr))) {
    ::close(fd);
    return out;
  }
  const std::size_t len = static_cast<std::size_t>(st.st_size);
  void* map = ::mmap(nullptr, len, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return out;
  const auto* base = static_cast<const unsigned char*>(map);
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(base);
  const bool ok =
      std::memcmp(eh->e_ident, ELFMAG, SELFMAG) == 0 &&
      eh->e_ident[EI_CLASS] == ELFCLASS64 &&
      eh->e_shoff + std::uint64_t{eh->e_shnum} * sizeof(Elf64_Shdr) <= len;
  if (ok) {
    const auto* sh = reinterpret_cast<const Elf64_Shdr*>(base + eh->e_shoff);
    for (unsigned i = 0; i < eh->e_shnum; ++i) {
      if (sh[i].sh_type != SHT_SYMTAB || sh[i].sh_link >= eh->e_shnum) continue;
      const Elf64_Shdr& strtab = sh[sh[i].sh_link];
      if (sh[i].sh_offset + sh[i].sh_size > len ||
          strtab.sh_offset + strtab.sh_size > len) {
        continue;
      }
      const auto* syms =
          reinterpret_cast<const Elf64_Sym*>(base + sh[i].sh_offset);
      const std::size_t count = sh[i].sh_size / sizeof(Elf64_Sym);
      const char* names =
          reinterpret_cast<const char*>(base + strtab.sh_offset);
      for (std::size_t k = 0; k < count; ++k) {
        if (ELF64_ST_TYPE(syms[k].st_info) != STT_FUNC ||
            syms[k].st_value == 0 || syms[k].st_name >= strtab.sh_size) {
          continue;
        }
        const char* name = names + syms[k].st_name;
        if (::strnlen(name, strtab.sh_size - syms[k].st_name) ==
            strtab.sh_size - syms[k].st_name) {
          continue;  // unterminated
        }
        out.push_back({syms[k].st_value, syms[k].st_size, name});
      }
    }
  }
  ::munmap(map, len);
  return out;
}

bool is_shared_object(const char* path) {
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  Elf64_Ehdr eh{};
  const bool ok =
      ::read(fd, &eh, sizeof(eh)) == static_cast<ssize_t>(sizeof(eh));
  ::close(fd);
  return ok && eh.e_type == ET_DYN;
}

// Looked up only to explain errors and retraces, so parsing a file's symbol
// table once and keeping the function symbols is cheap enough.
std::string symtab_lookup(const char* path, std::uintptr_t address,
                          std::uintptr_t base) {
  static std::mutex mu;
  static std::map<std::string, std::pair<bool, std::vector<FunctionSymbol>>>
      cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(path);
  if (it == cache.end()) {
    it =
        cache
            .emplace(path, std::pair(is_shared_object(path), read_symtab(path)))
            .first;
  }
  const auto& [pie, syms] = it->second;
  const std::uint64_t target = pie ? address - base : address;
  for (const FunctionSymbol& s : syms) {
    if (target == s.start || (target > s.start && target < s.start + s.size)) {
      return s.name;
    }
  }
  return {};
}
#endif

}  // namespace

std::string function_name(std::uintptr_t address) {
#ifdef KILN_HAVE_ELF
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(address), &info) != 0) {
    if (info.dli_sname != nullptr)
      return strip_signature(demangle(info.dli_sname));
    const auto base = reinterpret_cast<std::uintptr_t>(info.dli_fbase);
    std::string name;
    if (info.dli_fname != nullptr)
      name = symtab_lookup(info.dli_fname, address, base);
    if (name.empty()) name = symtab_lookup("/proc/self/exe", address, base);
    if (!name.empty()) return strip_signature(demangle(name.c_str()));
  }
#endif
  return hex_address(address);
}

std::string type_display_name(const std::type_info& t) {
  std::string s = demangle(t.name());
  erase_all(s, "(anonymous namespace)::");
  // A local class: "test_fn(int)::Pow<3>" -> "Pow<3>" (the enclosing function's
  // signature is noise; the class's own name and template arguments remain).
  // Not for lambdas: "f()::{lambda(int)#2}" is only told apart by its scope.
  if (s.find("{lambda") != std::string::npos) return s;
  int depth = 0;
  std::size_t cut = std::string::npos;
  for (std::size_t i = 0; i + 2 < s.size(); ++i) {
    if (s[i] == '<' || s[i] == '(') ++depth;
    if (s[i] == '>' || s[i] == ')') --depth;
    if (depth == 0 && s[i] == ')' && s.compare(i + 1, 2, "::") == 0) cut = i + 3;
  }
  if (cut != std::string::npos) s.erase(0, cut);
  return s;
}

std::string closure_name(std::string s) {
  constexpr std::string_view kLambda = "::{lambda(";
  constexpr std::string_view kFirst = ")#1}";
  const std::size_t at = s.rfind(kLambda);
  if (at == std::string::npos || at == 0 || !s.ends_with(kFirst)) return s;
  if (s[at - 1] == ')') return s;  // a lambda inside a function: keep it all
  s.resize(at);
  return s;
}

std::string format_double(double v) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, res.ptr);
}

std::string format_float(float v) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, res.ptr);
}

std::string quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string stream_to_string(const void* v,
                             void (*write)(std::ostream&, const void*)) {
  std::ostringstream os;
  write(os, v);
  return os.str();
}

}  // namespace detail

const std::type_info& StaticValue::type() const {
  return holder_ ? holder_->type() : typeid(void);
}

std::string StaticValue::type_name() const {
  return detail::type_display_name(type());
}

std::string StaticValue::repr() const {
  return holder_ ? holder_->repr() : "<empty>";
}

bool StaticValue::is_callable() const {
  return holder_ != nullptr &&
         (holder_->kind == detail::StaticKind::kFunctionPointer ||
          holder_->kind == detail::StaticKind::kStateless);
}

bool operator==(const StaticValue& a, const StaticValue& b) {
  if (a.holder_ == b.holder_) return true;
  if (a.holder_ == nullptr || b.holder_ == nullptr) return false;
  if (a.holder_->hash != b.holder_->hash) return false;  // a fast negative only
  if (a.holder_->type() != b.holder_->type()) return false;
  return a.holder_->equals(*b.holder_);
}

}  // namespace kiln
