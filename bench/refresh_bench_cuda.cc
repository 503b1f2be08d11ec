#include "bench/refresh_bench_cuda.h"

#include <cuda_runtime_api.h>

#include <optional>
#include <utility>

#include "bench/bench_util.h"
#include "bench/cuda_bench_util.h"
#include "common/base/status_macros.h"
#include "kernels/transform/cublas_handle.h"
#include "kernels/transform/refresh_cuda.h"

namespace gift::bench {

absl::StatusOr<nlohmann::json> RunGpuRefreshShape(const GpuRefreshShapeConfig& config) {
  using kernels::StatisticsSide;
  Stream stream;
  GIFT_RETURN_IF_ERROR(stream.Init());
  kernels::CublasHandle blas;
  GIFT_RETURN_IF_ERROR(blas.Init(stream.get()));
  kernels::CusolverHandle solver;
  GIFT_RETURN_IF_ERROR(solver.Init(stream.get()));
  const kernels::RefreshHandles h{stream.get(), blas.get(), solver.get()};

  GIFT_ASSIGN_OR_RETURN(DeviceBuffer grad, DeviceBuffer::Upload(*config.gradient));
  GIFT_ASSIGN_OR_RETURN(kernels::SideStatisticsCuda in,
                        kernels::SideStatisticsCuda::Create(config.d_in, config.decay));
  GIFT_ASSIGN_OR_RETURN(kernels::SideStatisticsCuda out,
                        kernels::SideStatisticsCuda::Create(config.d_out, config.decay));
  const float* g = grad.floats();
  GIFT_ASSIGN_OR_RETURN(const Timing update, TimeRuns(config.reps, [&]() -> absl::Status {
                          GIFT_RETURN_IF_ERROR(
                              in.Update(h, StatisticsSide::kInput, {g}, config.d_out, config.d_in));
                          GIFT_RETURN_IF_ERROR(out.Update(h, StatisticsSide::kOutput, {g},
                                                          config.d_out, config.d_in));
                          GIFT_BENCH_CUDA(cudaStreamSynchronize(h.stream));
                          return absl::OkStatus();
                        }));
  nlohmann::json doc = {{"update_s", update.median_s}, {"bases", nlohmann::json::array()}};
  for (const int64_t rank : config.ranks) {
    transform::TensorBasisHeader header{.tensor_id = 1, .version = 1, .d_out = config.d_out,
                                        .d_in = config.d_in};
    std::optional<transform::TensorBasis> last;
    GIFT_ASSIGN_OR_RETURN(const Timing basis, TimeRuns(config.reps, [&]() -> absl::Status {
                            GIFT_ASSIGN_OR_RETURN(
                                transform::TensorBasis b,
                                kernels::TensorBasisFromStatisticsCuda(h, header, &out, &in, rank));
                            last.emplace(std::move(b));
                            return absl::OkStatus();
                          }));
    if (config.on_basis && last.has_value()) config.on_basis(rank, *last);
    doc["bases"].push_back({{"rank", rank}, {"basis_s", basis.median_s}});
  }
  return doc;
}

}  // namespace gift::bench
