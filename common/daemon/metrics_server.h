// The daemons' Prometheus endpoint: an HTTP server (GNU libmicrohttpd, one
// polling thread) that serves prometheus-cpp's text exposition format at
// /metrics (GET or HEAD; 404 for any other path, 405 for other methods).
//
// Why libmicrohttpd and not prometheus-cpp's Exposer: the Exposer's civetweb
// starts its threads with a fixed 100 KiB stack, and glibc carves the
// process's static TLS out of every thread's stack. OpenBLAS alone takes
// 60 KiB of it, cudart another 8 KiB (a scrape then overflows the stack) and
// cuBLAS 94 KiB (the threads do not start), so a worker with the CUDA path
// could not serve metrics. libmicrohttpd's thread gets the default stack.
//
//   GIFT_ASSIGN_OR_RETURN(std::unique_ptr<MetricsServer> metrics,
//                         MetricsServer::Start("0.0.0.0:9471"));
//   auto& pushes = prometheus::BuildCounter()
//                      .Name("gift_server_pushes_total").Help("...")
//                      .Register(*metrics->registry()).Add({});
//   metrics->AddRefresher([&] { AdvanceCounterTo(pushes, shard->counters().pushes); });
//
// Naming (Prometheus conventions, one prefix for the project): gift_<daemon>_
// <what>_<unit>, base units (_seconds, _bytes), counters end in _total, and
// labels take a small fixed set of values only (a method, a status code name,
// a role), never ids, names, steps or tensors.
//
// Refreshers copy values the daemon only polls (counters of a component that
// has no metric hooks) into the registry's metrics just before every scrape,
// so a scrape always sees current values and nothing polls in between.
//
// Ownership: the server owns the HTTP threads and the registry (shared with
// whoever adds metrics; the metrics outlive the server as long as a
// registry pointer is held). Refreshers and what they capture must stay
// valid until the server is destroyed. Thread safety: all methods are
// thread-safe; refreshers run on an HTTP thread, one scrape at a time.
#ifndef GIFT_COMMON_DAEMON_METRICS_SERVER_H_
#define GIFT_COMMON_DAEMON_METRICS_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"

struct MHD_Daemon;

namespace gift::daemon {

class MetricsServer {
 public:
  // Serves /metrics on `listen` ("HOST:PORT"; port 0 picks a free port, see
  // address()). An empty `listen` disables serving: the server still has a
  // registry and takes refreshers, so callers need no special case, and
  // address() is "". INVALID_ARGUMENT for a malformed address, UNAVAILABLE
  // when it cannot be bound (no exception escapes).
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(absl::string_view listen);

  // A daemon's metrics endpoint: Start(listen), except that when the address
  // is the daemon's default (`explicitly_set` false) and cannot be bound
  // (several daemons on one host), it logs `metrics_unavailable` and runs
  // without serving; an address the operator chose must work. Logs
  // `metrics_listening` {address} when it serves.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> StartForDaemon(absl::string_view listen,
                                                                       bool explicitly_set);

  // Stops serving (waits for scrapes in progress).
  ~MetricsServer();

  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  bool serving() const { return http_ != nullptr; }
  // The bound "HOST:PORT" (the port resolved when 0 was asked); "" when disabled.
  const std::string& address() const { return address_; }
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  // Runs `refresh` before every scrape (in the order added).
  void AddRefresher(std::function<void()> refresh);

  // The page a scrape would get now (refreshers run), for tests and logs.
  std::string Render();

 private:
  class Collector;
  MetricsServer();

  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<Collector> collector_;
  MHD_Daemon* http_ = nullptr;  // owned (MHD_stop_daemon); null when disabled
  std::string address_;
};

// Raises `counter` to `total` (a cumulative value polled from elsewhere);
// a smaller total (a restarted source) leaves it unchanged.
void AdvanceCounterTo(prometheus::Counter& counter, double total);

}  // namespace gift::daemon

#endif  // GIFT_COMMON_DAEMON_METRICS_SERVER_H_
