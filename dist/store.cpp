// Rendezvous stores (see store.hpp): the shared key prefix and waits, and the
// directory store over Gloo's FileStore.
#include "kiln/dist/store.hpp"

#include <gloo/rendezvous/file_store.h>

#include <filesystem>
#include <thread>

#include "kiln/dist/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::dist::detail {

using kiln::detail::join;
using kiln::detail::str_cat;

void Store::set(const std::string& key, const std::vector<char>& data) { put(prefix_ + key, data); }

std::vector<char> Store::get(const std::string& key) {
  wait({key}, timeout_);
  return *lookup(prefix_ + key);
}

void Store::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<std::string> missing = keys;
  for (;;) {
    std::erase_if(missing, [&](const std::string& k) { return has(k); });
    if (missing.empty()) return;
    if (std::chrono::steady_clock::now() >= deadline) {
      throw DistTimeoutError(str_cat("waited ", timeout.count(), " ms for the key(s) ",
                                     join(missing, ", "), " in the rendezvous store (", where(),
                                     ")"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

namespace {

// Gloo's FileStore, with its protected non-blocking check made reachable: its
// own wait rounds the timeout down to whole seconds.
class GlooFileStore : public gloo::rendezvous::FileStore {
 public:
  using FileStore::FileStore;
  bool exists(const std::string& key) { return check({key}); }
};

class FileStore final : public Store {
 public:
  FileStore(const std::string& directory, const std::string& prefix,
            std::chrono::milliseconds timeout)
      : Store(prefix, timeout), directory_(directory), files_(directory) {}
  std::string where() const override { return "directory " + directory_; }

 protected:
  void put(const std::string& key, const std::vector<char>& data) override {
    files_.set(key, data);
  }
  std::optional<std::vector<char>> lookup(const std::string& key) override {
    if (!files_.exists(key)) return std::nullopt;
    return files_.get(key);
  }

 private:
  std::string directory_;
  GlooFileStore files_;
};

}  // namespace

std::unique_ptr<Store> make_file_store(const std::string& directory, const std::string& prefix,
                                       std::chrono::milliseconds timeout) {
  std::error_code ec;
  std::filesystem::create_directories(directory, ec);
  if (ec || !std::filesystem::is_directory(directory)) {
    throw ValueError(str_cat("cannot use ", directory, " as the rendezvous directory: ",
                             ec ? ec.message() : "not a directory"));
  }
  return std::make_unique<FileStore>(directory, prefix, timeout);
}

}  // namespace kiln::dist::detail
