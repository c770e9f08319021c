#include "server/peer_socket.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace fuselm::server {
namespace {

// "1.2.3.4" or "::1" and the port of a socket address; false for other families.
bool address_of(const sockaddr_storage& ss, std::string& addr, int& port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    if (!inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf)) return false;
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    if (!inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf)) return false;
    port = ntohs(a->sin6_port);
  } else {
    return false;
  }
  addr = buf;
  return true;
}

bool is_connection(int fd, const std::string& remote_addr, int remote_port, int local_port) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  std::string addr;
  int port = -1;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0 || !address_of(ss, addr, port)) return false;
  if (port != remote_port || addr != remote_addr) return false;
  if (local_port <= 0) return true;
  len = sizeof ss;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0 || !address_of(ss, addr, port)) return false;
  return port == local_port;
}

}  // namespace

int find_connection_socket(const std::string& remote_addr, int remote_port, int local_port) {
  if (remote_port <= 0) return -1;
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    char* stop = nullptr;
    const long fd = std::strtol(name.c_str(), &stop, 10);
    if (stop == name.c_str() || *stop != '\0') continue;
    std::error_code lec;
    const auto target = std::filesystem::read_symlink(it->path(), lec);
    if (lec || target.string().rfind("socket:", 0) != 0) continue;
    if (is_connection(static_cast<int>(fd), remote_addr, remote_port, local_port)) return static_cast<int>(fd);
  }
  return -1;
}

bool peer_hung_up(int fd) {
  pollfd p{fd, static_cast<short>(POLLIN | POLLRDHUP), 0};
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
  if (p.revents & POLLIN) {  // readable: data the client pipelined, or the end of its stream
    char c;
    return recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
  }
  return false;
}

}  // namespace fuselm::server
