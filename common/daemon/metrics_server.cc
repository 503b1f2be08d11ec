#include "common/daemon/metrics_server.h"

#include <CivetServer.h>

#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/daemon/daemon_flags.h"
#include "prometheus/collectable.h"
#include "prometheus/exposer.h"
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

// civetweb's messages go to the structured log instead of stderr text.
int LogCivetMessage(const mg_connection* /*conn*/, const char* message) {
  Log(Level::kWarning, "metrics_http_error", {{"error", message == nullptr ? "" : message}});
  return 1;
}

}  // namespace

MetricsServer::MetricsServer()
    : registry_(std::make_shared<prometheus::Registry>()),
      collector_(std::make_shared<Collector>(registry_)) {}

MetricsServer::~MetricsServer() { exposer_.reset(); }

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(absl::string_view listen) {
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  if (listen.empty()) return server;
  if (absl::Status s = CheckHostPort(listen); !s.ok()) return s;
  std::string host(listen.substr(0, listen.rfind(':')));
  // civetweb takes "PORT" for every address and "[::1]:PORT" with brackets.
  static const CivetCallbacks* const callbacks = [] {
    auto* c = new CivetCallbacks();
    c->log_message = &LogCivetMessage;
    return c;
  }();
  try {
    server->exposer_ = std::make_unique<prometheus::Exposer>(
        std::vector<std::string>{"listening_ports", std::string(listen), "num_threads", "2"},
        callbacks);
    server->exposer_->RegisterCollectable(server->collector_, "/metrics");
    const std::vector<int> ports = server->exposer_->GetListeningPorts();
    if (ports.empty() || ports[0] <= 0) {
      return absl::UnavailableError(
          absl::StrCat("metrics server on ", listen, ": no listening port"));
    }
    server->address_ = absl::StrCat(host, ":", ports[0]);
  } catch (const std::exception& e) {
    server->exposer_.reset();
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", listen, ": ", e.what()));
  }
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
