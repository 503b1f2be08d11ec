// Helpers shared by the coordinator tests: a settable clock and valid
// serialized bases (temp dirs: tests/testing/temp_dir.h).
#ifndef GIFT_TESTS_COORDINATOR_TEST_UTIL_H_
#define GIFT_TESTS_COORDINATOR_TEST_UTIL_H_

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/transform/basis_serialization.h"
#include "server/coordinator/cluster_state.h"

namespace gift::coordinator::testing {

// A clock that moves only when told. Thread-safe.
class FakeClock : public Clock {
 public:
  absl::Time Now() override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  absl::Mutex mu_;
  absl::Time now_ = absl::FromUnixSeconds(1'800'000'000);
};

// A RegisterTensors request of FP32 tensors (name, shape).
inline gift::v1::RegisterTensorsRequest MakeRegisterRequest(
    const std::vector<std::pair<std::string, std::vector<int64_t>>>& tensors) {
  gift::v1::RegisterTensorsRequest request;
  for (const auto& [name, shape] : tensors) {
    gift::v1::TensorSpec* spec = request.add_tensors();
    spec->set_name(name);
    for (int64_t d : shape) spec->add_shape(d);
    spec->set_dtype(gift::v1::DTYPE_FLOAT32);
  }
  return request;
}

// The bytes of a valid basis for a d_out x d_in tensor (input side, rank 2).
inline std::string MakeBasisBytes(uint64_t tensor_id, uint64_t version, int64_t d_out, int64_t d_in,
                                  int64_t rank = 2) {
  Eigen::VectorXd diag(d_in);
  for (int64_t i = 0; i < d_in; ++i) diag(i) = 1.0 + static_cast<double>(d_in - i);
  const Eigen::MatrixXd factor = diag.asDiagonal();
  transform::SideBasis in_side = transform::SideBasis::FromFactor(factor, rank).value();
  transform::TensorBasis basis =
      transform::TensorBasis::Create({.tensor_id = tensor_id,
                                      .version = version,
                                      .d_out = d_out,
                                      .d_in = d_in,
                                      .config = {.sides = transform::Sides::kInput, .power = 0.25}},
                                     std::nullopt, std::move(in_side))
          .value();
  return transform::SerializeTensorBasis(basis);
}

}  // namespace gift::coordinator::testing

#endif  // GIFT_TESTS_COORDINATOR_TEST_UTIL_H_
