#include "common/daemon/polled_metrics.h"

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"

namespace gift::daemon {

PolledSink::PolledSink(prometheus::Registry& registry, PolledKind kind, const std::string& name,
                       const std::string& help, const prometheus::Labels& labels) {
  // prometheus-cpp returns the registered family for a second Register with
  // the same name, type, help and constant labels.
  if (kind == PolledKind::kCounter) {
    counter_ = &prometheus::BuildCounter().Name(name).Help(help).Register(registry).Add(labels);
  } else {
    gauge_ = &prometheus::BuildGauge().Name(name).Help(help).Register(registry).Add(labels);
  }
}

void PolledSink::Write(double value) const {
  if (counter_ != nullptr) {
    AdvanceCounterTo(*counter_, value);
  } else {
    gauge_->Set(value);
  }
}

}  // namespace gift::daemon
