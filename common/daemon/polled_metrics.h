// A table of Prometheus metrics copied from a component's own counters on
// every scrape: one row per metric, one snapshot of the component per scrape.
//
//   using C = AggregatorShard::Counters;
//   AddPolledMetrics<C>(*metrics, [shard] { return shard->counters(); }, {
//       {kCounter, "gift_server_pushes_total", "Chunk pushes accepted",
//        Field(&C::pushes_accepted)},
//       {kCounter, "gift_server_data_bytes_total", "Bytes moved", Field(&C::pushed),
//        {{"direction", "push"}}},
//       {kGauge, "gift_server_epoch", "Epoch the shard serves", Field(&C::epoch)},
//   });
//
// Counters are raised to the polled total (AdvanceCounterTo: a smaller total
// leaves them unchanged); gauges are set to it. Rows that share a name are
// one family: the same kind and help, their labels telling them apart.
// Naming: metrics_server.h.
//
// Ownership: `snapshot` and the row functions are kept by the refresher until
// the MetricsServer is destroyed (what they capture must live that long).
// Thread safety: `snapshot` runs on the HTTP thread (one scrape at a time);
// it must be safe to call concurrently with the component's own threads.
#ifndef GIFT_COMMON_DAEMON_POLLED_METRICS_H_
#define GIFT_COMMON_DAEMON_POLLED_METRICS_H_

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/daemon/metrics_server.h"
#include "prometheus/labels.h"

namespace gift::daemon {

enum class PolledKind { kCounter, kGauge };
inline constexpr PolledKind kCounter = PolledKind::kCounter;
inline constexpr PolledKind kGauge = PolledKind::kGauge;

template <typename Snapshot>
struct PolledMetric {
  PolledKind kind;
  std::string name;
  std::string help;
  std::function<double(const Snapshot&)> value;
  prometheus::Labels labels;  // none when left out
};

// The row function that reads `member` of the snapshot (any arithmetic type).
template <typename Snapshot, typename T>
std::function<double(const Snapshot&)> Field(T Snapshot::*member) {
  return [member](const Snapshot& s) { return static_cast<double>(s.*member); };
}

// One polled metric, registered: where a scrape writes a row's value.
class PolledSink {
 public:
  // Registers `kind` `name` {labels} in `registry`, reusing the family of an
  // earlier sink of the same name and kind.
  PolledSink(prometheus::Registry& registry, PolledKind kind, const std::string& name,
             const std::string& help, const prometheus::Labels& labels);
  void Write(double value) const;

 private:
  prometheus::Counter* counter_ = nullptr;
  prometheus::Gauge* gauge_ = nullptr;
};

// Registers the rows in `metrics`' registry (at 0 until the first scrape)
// and adds a refresher that takes one `snapshot` and writes every row.
template <typename Snapshot>
void AddPolledMetrics(MetricsServer& metrics, std::function<Snapshot()> snapshot,
                      std::vector<PolledMetric<Snapshot>> rows) {
  auto sinks = std::make_shared<std::vector<std::pair<PolledSink, PolledMetric<Snapshot>>>>();
  for (PolledMetric<Snapshot>& row : rows) {
    PolledSink sink(*metrics.registry(), row.kind, row.name, row.help, row.labels);
    sinks->emplace_back(sink, std::move(row));
  }
  metrics.AddRefresher([snapshot = std::move(snapshot), sinks] {
    const Snapshot s = snapshot();
    for (const auto& [sink, row] : *sinks) sink.Write(row.value(s));
  });
}

}  // namespace gift::daemon

#endif  // GIFT_COMMON_DAEMON_POLLED_METRICS_H_
