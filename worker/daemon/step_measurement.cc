#include "worker/daemon/step_measurement.h"

#include <cmath>
#include <utility>

#include "worker/intake/registered_tensor.h"

namespace gift::worker {

double RelativeL2(const float* got, const float* want, uint64_t n) {
  double err = 0, norm = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    err += d * d;
    norm += static_cast<double>(want[i]) * want[i];
  }
  if (norm == 0) return err == 0 ? 0.0 : INFINITY;
  return std::sqrt(err / norm);
}

absl::StatusOr<StepMeasurement> StepMeasurement::Exact(uint64_t step,
                                                       const std::vector<LocalTensor>& tensors,
                                                       const DeviceMemory* memory,
                                                       StepExchange* exchange,
                                                       absl::Time deadline) {
  std::vector<LocalTensor> copies = tensors;
  std::vector<std::vector<float>> exact(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (absl::Status s = ReadTensor(tensors[i], memory, &exact[i]); !s.ok()) return s;
    copies[i].data = exact[i].data();
    copies[i].device = false;
  }
  auto done = exchange->Run(step, copies, ExchangeKind::kExactMeasure, deadline);
  if (!done.ok()) return done.status();
  return StepMeasurement(std::move(exact), done->report);
}

absl::Status StepMeasurement::Compare(const std::vector<LocalTensor>& tensors,
                                      const DeviceMemory* memory,
                                      gift::v1::PushPullResponse* response) {
  device_averages_.assign(tensors.size(), {});
  for (size_t i = 0; i < tensors.size(); ++i) {
    const LocalTensor& t = tensors[i];
    if (t.device) {
      if (absl::Status s = ReadTensor(t, memory, &device_averages_[i]); !s.ok()) return s;
    }
    const float* average = t.device ? device_averages_[i].data() : t.data;
    response->mutable_tensors(static_cast<int>(i))
        ->set_rel_l2_error(RelativeL2(average, exact_[i].data(), t.rows * t.cols));
  }
  return absl::OkStatus();
}

const std::vector<float>* StepMeasurement::device_average(size_t i) const {
  if (i >= device_averages_.size() || device_averages_[i].empty()) return nullptr;
  return &device_averages_[i];
}

StepMeasurement::Summary StepMeasurement::Summarize(const gift::v1::PushPullResponse& response) {
  double sum[2] = {0, 0};
  int count[2] = {0, 0};
  for (const gift::v1::TensorResult& r : response.tensors()) {
    sum[r.transformed()] += r.rel_l2_error();
    ++count[r.transformed()];
  }
  Summary s;
  if (count[1] > 0) s.transformed = sum[1] / count[1];
  if (count[0] > 0) s.direct = sum[0] / count[0];
  return s;
}

}  // namespace gift::worker
