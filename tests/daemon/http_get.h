// A minimal HTTP/1.0 request over a raw socket, for tests of /metrics pages.
#ifndef GIFT_TESTS_DAEMON_HTTP_GET_H_
#define GIFT_TESTS_DAEMON_HTTP_GET_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace gift::daemon::testing {

// Sends `method` http://127.0.0.1:<port of host_port><path>; returns the raw
// response (status line, headers, body), or "" when the connection fails.
inline std::string HttpRequest(const std::string& host_port, const std::string& method,
                               const std::string& path) {
  int port = 0;
  if (!absl::SimpleAtoi(host_port.substr(host_port.rfind(':') + 1), &port)) return "";
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "";
  }
  const std::string request = absl::StrCat(method, " ", path, " HTTP/1.0\r\nHost: localhost\r\n\r\n");
  if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return "";
  }
  std::string response;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) response.append(buf, n);
  close(fd);
  return response;
}

inline std::string HttpGet(const std::string& host_port, const std::string& path) {
  return HttpRequest(host_port, "GET", path);
}

}  // namespace gift::daemon::testing

#endif  // GIFT_TESTS_DAEMON_HTTP_GET_H_
