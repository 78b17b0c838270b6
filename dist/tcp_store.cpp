// The TCP rendezvous store (see tcp_store.hpp). Wire format, both ways:
// request  = op (1 byte: 'S' set, 'G' get) | key length (u32) | key |
//            data length (u32) | data
// reply    = found (1 byte) | data length (u32) | data
// The server is one thread polling its listening socket, its clients and a
// pipe that wakes it to stop; requests are small and sent whole, so it reads
// each one to its end before serving the next.
#include "kiln/dist/tcp_store.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "kiln/dist/error.hpp"
#include "kiln/runtime/strings.hpp"

namespace kiln::dist::detail {

using kiln::detail::str_cat;
namespace {

constexpr std::uint32_t kMaxField = 1u << 24;  // keys and values are small

struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  Fd(Fd&& o) noexcept : fd(std::exchange(o.fd, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd = std::exchange(o.fd, -1);
    }
    return *this;
  }
  ~Fd() { reset(); }
  void reset() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

struct Endpoint {
  std::string host, port;
};

Endpoint parse(const std::string& address) {
  const auto colon = address.rfind(':');
  std::uint32_t port = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port == 0 || port > 65535) {
    throw DistError(
        str_cat("the rendezvous address '", address, "' is not host:port (KILN_DIST_ADDR)"));
  }
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);  // [::1]:port
  }
  return {host, std::to_string(port)};
}

struct AddrInfo {
  addrinfo* list = nullptr;
  ~AddrInfo() {
    if (list) freeaddrinfo(list);
  }
};

void resolve(const std::string& address, const Endpoint& e, bool passive, AddrInfo& out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  const int rc = getaddrinfo(e.host.c_str(), e.port.c_str(), &hints, &out.list);
  if (rc != 0) {
    throw DistError(
        str_cat("cannot resolve the rendezvous address '", address, "': ", gai_strerror(rc)));
  }
}

// Whole reads and writes; false on EOF or error (errno says which).
bool write_all(int fd, const void* p, std::size_t n) {
  const auto* b = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::send(fd, b, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    b += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}
bool read_all(int fd, void* p, std::size_t n) {
  auto* b = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = ::recv(fd, b, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      if (r == 0) errno = ECONNRESET;
      return false;
    }
    b += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}
bool write_field(int fd, const char* p, std::uint32_t n) {
  return write_all(fd, &n, sizeof n) && write_all(fd, p, n);
}
bool read_field(int fd, std::vector<char>& out) {
  std::uint32_t n = 0;
  if (!read_all(fd, &n, sizeof n) || n > kMaxField) return false;
  out.resize(n);
  return read_all(fd, out.data(), n);
}

class Server {
 public:
  Server(const std::string& address, const Endpoint& e) {
    AddrInfo ai;
    resolve(address, e, true, ai);
    std::string why = "no usable address";
    for (addrinfo* a = ai.list; a != nullptr; a = a->ai_next) {
      Fd s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
      if (s.fd < 0) continue;
      const int one = 1;
      ::setsockopt(s.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (::bind(s.fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(s.fd, 128) == 0) {
        listener_ = std::move(s);
        break;
      }
      why = std::strerror(errno);
    }
    if (listener_.fd < 0) {
      throw DistError(str_cat("rank 0 cannot serve the rendezvous at '", address, "': ", why));
    }
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
      throw DistError(str_cat("rendezvous server: pipe: ", std::strerror(errno)));
    }
    wake_read_ = Fd(pipe_fds[0]);
    wake_write_ = Fd(pipe_fds[1]);
    thread_ = std::thread([this] { loop(); });
  }
  ~Server() {
    const char x = 0;
    [[maybe_unused]] ssize_t w = ::write(wake_write_.fd, &x, 1);
    thread_.join();
  }

 private:
  void loop() {
    std::vector<Fd> clients;
    for (;;) {
      std::vector<pollfd> fds{{wake_read_.fd, POLLIN, 0}, {listener_.fd, POLLIN, 0}};
      for (const Fd& c : clients) fds.push_back({c.fd, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[0].revents != 0) return;
      if (fds[1].revents & POLLIN) {
        const int c = ::accept4(listener_.fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (c >= 0) clients.emplace_back(c);
      }
      for (std::size_t i = 2; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        if (!serve(fds[i].fd)) clients[i - 2].reset();
      }
      std::erase_if(clients, [](const Fd& c) { return c.fd < 0; });
    }
  }
  // One request; false when the client is gone or spoke nonsense.
  bool serve(int fd) {
    char op = 0;
    std::vector<char> key, data;
    if (!read_all(fd, &op, 1) || !read_field(fd, key) || !read_field(fd, data)) return false;
    const std::string k(key.begin(), key.end());
    if (op == 'S') {
      table_[k] = std::move(data);
      const char ok = 1;
      return write_all(fd, &ok, 1) && write_field(fd, nullptr, 0);
    }
    if (op != 'G') return false;
    const auto it = table_.find(k);
    const char found = it != table_.end();
    if (!found) return write_all(fd, &found, 1) && write_field(fd, nullptr, 0);
    return write_all(fd, &found, 1) &&
           write_field(fd, it->second.data(), static_cast<std::uint32_t>(it->second.size()));
  }

  Fd listener_, wake_read_, wake_write_;
  std::map<std::string, std::vector<char>> table_;  // the server thread's only
  std::thread thread_;
};

class TcpStore final : public Store {
 public:
  TcpStore(const std::string& address, bool serve, const std::string& prefix,
           std::chrono::milliseconds timeout)
      : Store(prefix, timeout), address_(address) {
    const Endpoint e = parse(address);
    if (serve) server_ = std::make_unique<Server>(address, e);
    connect(e, timeout);
  }
  std::string where() const override { return "tcp " + address_; }

 protected:
  void put(const std::string& key, const std::vector<char>& data) override {
    std::vector<char> reply;
    request('S', key, data, reply);
  }
  std::optional<std::vector<char>> lookup(const std::string& key) override {
    std::vector<char> reply;
    if (!request('G', key, {}, reply)) return std::nullopt;
    return reply;
  }

 private:
  void connect(const Endpoint& e, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::string why;
    for (;;) {
      AddrInfo ai;
      resolve(address_, e, false, ai);
      for (addrinfo* a = ai.list; a != nullptr; a = a->ai_next) {
        Fd s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
        if (s.fd < 0) continue;
        if (::connect(s.fd, a->ai_addr, a->ai_addrlen) == 0) {
          const int one = 1;
          ::setsockopt(s.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          timeval tv{static_cast<time_t>(timeout.count() / 1000),
                     static_cast<suseconds_t>((timeout.count() % 1000) * 1000)};
          ::setsockopt(s.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
          ::setsockopt(s.fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
          socket_ = std::move(s);
          return;
        }
        why = std::strerror(errno);
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        throw DistTimeoutError(str_cat("could not reach the rendezvous at ", address_,
                                       " (served by rank 0) within ", timeout.count(),
                                       " ms: ", why));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  // Returns the reply's found flag.
  bool request(char op, const std::string& key, const std::vector<char>& data,
               std::vector<char>& reply) {
    char found = 0;
    if (!write_all(socket_.fd, &op, 1) ||
        !write_field(socket_.fd, key.data(), static_cast<std::uint32_t>(key.size())) ||
        !write_field(socket_.fd, data.data(), static_cast<std::uint32_t>(data.size())) ||
        !read_all(socket_.fd, &found, 1) || !read_field(socket_.fd, reply)) {
      const bool timed_out = errno == EAGAIN || errno == EWOULDBLOCK;
      const std::string msg = str_cat("the rendezvous at ", address_,
                                      " (served by rank 0) failed: ", std::strerror(errno));
      if (timed_out) throw DistTimeoutError(msg);
      throw DistError(msg);
    }
    return found != 0;
  }

  std::string address_;
  std::unique_ptr<Server> server_;
  Fd socket_;
};

}  // namespace

std::unique_ptr<Store> make_tcp_store(const std::string& address, bool serve,
                                      const std::string& prefix,
                                      std::chrono::milliseconds timeout) {
  return std::make_unique<TcpStore>(address, serve, prefix, timeout);
}

}  // namespace kiln::dist::detail
