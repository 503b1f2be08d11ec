#include "common/daemon/metrics_server.h"

#include <microhttpd.h>
#include <netdb.h>
#include <sys/socket.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/daemon/daemon_flags.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "prometheus/text_serializer.h"

namespace gift::daemon {

using gift::logging::Level;
using gift::logging::Log;

// The one collectable the exposer serves: runs the refreshers, then collects
// the registry.
class MetricsServer::Collector : public prometheus::Collectable {
 public:
  explicit Collector(std::shared_ptr<prometheus::Registry> registry)
      : registry_(std::move(registry)) {}

  void Add(std::function<void()> refresh) {
    absl::MutexLock lock(&mu_);
    refreshers_.push_back(std::move(refresh));
  }

  std::vector<prometheus::MetricFamily> Collect() const override {
    absl::MutexLock lock(&mu_);
    for (const auto& refresh : refreshers_) refresh();
    return registry_->Collect();
  }

 private:
  const std::shared_ptr<prometheus::Registry> registry_;
  mutable absl::Mutex mu_;
  std::vector<std::function<void()>> refreshers_ ABSL_GUARDED_BY(mu_);
};

namespace {

// libmicrohttpd's messages go to the structured log instead of stderr text.
void LogHttpMessage(void* /*context*/, const char* format, va_list args) {
  char message[512];
  std::vsnprintf(message, sizeof(message), format, args);
  size_t n = std::strlen(message);
  while (n > 0 && (message[n - 1] == '\n' || message[n - 1] == '\r')) message[--n] = '\0';
  Log(Level::kWarning, "metrics_http_error", {{"error", message}});
}

MHD_Result Reply(MHD_Connection* connection, unsigned status, const std::string& body,
                 const char* content_type) {
  MHD_Response* response =
      MHD_create_response_from_buffer(body.size(), const_cast<char*>(body.data()),
                                      MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return MHD_NO;
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
  const MHD_Result queued = MHD_queue_response(connection, status, response);
  MHD_destroy_response(response);
  return queued;
}

// One request: GET or HEAD of /metrics. Runs on the server's thread; catches
// everything (an exception must not leave a C callback).
MHD_Result ServeRequest(void* self, MHD_Connection* connection, const char* url,
                               const char* method, const char* /*version*/,
                               const char* /*upload_data*/, size_t* upload_data_size,
                               void** request_state) {
  // The first call per request only announces it (headers read); answer on
  // the second, once any body (ignored) is consumed.
  static int announced;
  if (*request_state == nullptr) {
    *request_state = &announced;
    return MHD_YES;
  }
  if (*upload_data_size != 0) {
    *upload_data_size = 0;
    return MHD_YES;
  }
  constexpr char kText[] = "text/plain; version=0.0.4; charset=utf-8";
  if (std::strcmp(method, MHD_HTTP_METHOD_GET) != 0 &&
      std::strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
    return Reply(connection, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET and HEAD\n", "text/plain");
  }
  if (std::strcmp(url, "/metrics") != 0) {
    return Reply(connection, MHD_HTTP_NOT_FOUND, "metrics are at /metrics\n", "text/plain");
  }
  try {
    return Reply(connection, MHD_HTTP_OK, static_cast<MetricsServer*>(self)->Render(), kText);
  } catch (const std::exception& e) {
    Log(Level::kError, "metrics_render_failed", {{"error", e.what()}});
    return Reply(connection, MHD_HTTP_INTERNAL_SERVER_ERROR, "cannot render metrics\n",
                 "text/plain");
  }
}

}  // namespace

MetricsServer::MetricsServer()
    : registry_(std::make_shared<prometheus::Registry>()),
      collector_(std::make_shared<Collector>(registry_)) {}

MetricsServer::~MetricsServer() {
  if (http_ != nullptr) MHD_stop_daemon(http_);  // waits for its thread
}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(absl::string_view listen) {
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  if (listen.empty()) return server;
  if (absl::Status s = CheckHostPort(listen); !s.ok()) return s;
  const size_t colon = listen.rfind(':');
  std::string host(listen.substr(0, colon));
  const std::string port(listen.substr(colon + 1));
  const std::string shown = host;  // as given, brackets included
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int err = getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints,
                                  &found);
      err != 0 || found == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("metrics address ", listen, ": ",
                                                   err != 0 ? gai_strerror(err) : "no address"));
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> addresses(found, &freeaddrinfo);
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
  if (found->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
  // MHD_OPTION_THREAD_STACK_SIZE 0: the default stack (see the header for why
  // a small one fails). Connections are few (scrapers), and each is dropped
  // after 30 s of silence.
  server->http_ = MHD_start_daemon(
      flags, 0, nullptr, nullptr, &ServeRequest, server.get(), MHD_OPTION_SOCK_ADDR, found->ai_addr,
      MHD_OPTION_THREAD_STACK_SIZE, static_cast<size_t>(0), MHD_OPTION_CONNECTION_LIMIT, 64u,
      MHD_OPTION_CONNECTION_TIMEOUT, 30u, MHD_OPTION_EXTERNAL_LOGGER, &LogHttpMessage, nullptr,
      MHD_OPTION_END);
  if (server->http_ == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", listen, ": the address cannot be bound"));
  }
  const MHD_DaemonInfo* bound = MHD_get_daemon_info(server->http_, MHD_DAEMON_INFO_BIND_PORT);
  if (bound == nullptr || bound->port == 0) {
    return absl::UnavailableError(absl::StrCat("metrics server on ", listen, ": no listening port"));
  }
  server->address_ = absl::StrCat(shown, ":", bound->port);
  return server;
}

void MetricsServer::AddRefresher(std::function<void()> refresh) {
  collector_->Add(std::move(refresh));
}

std::string MetricsServer::Render() {
  return prometheus::TextSerializer().Serialize(collector_->Collect());
}

void AdvanceCounterTo(prometheus::Counter& counter, double total) {
  const double now = counter.Value();
  if (total > now) counter.Increment(total - now);
}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::StartForDaemon(
    absl::string_view listen, bool explicitly_set) {
  absl::StatusOr<std::unique_ptr<MetricsServer>> metrics = Start(listen);
  if (!metrics.ok() && !explicitly_set) {
    logging::Log(logging::Level::kWarning, "metrics_unavailable",
                 {{"address", listen}, {"error", metrics.status().message()}});
    metrics = Start("");
  }
  if (metrics.ok() && (*metrics)->serving()) {
    logging::Log(logging::Level::kInfo, "metrics_listening", {{"address", (*metrics)->address()}});
  }
  return metrics;
}

}  // namespace gift::daemon
