// The gift.v1.Worker gRPC service over a WorkerCore: each call forwards to
// the daemon and maps its absl::Status to the gRPC status (same code, same
// message). PushPull blocks its handler thread for the step; StartTensors for
// the encoding and pushing of its tensors.
//
// Ownership: does not own the daemon, which must outlive the service.
// Thread safety: thread-safe (the daemon is).
#ifndef GIFT_WORKER_DAEMON_WORKER_GRPC_SERVICE_H_
#define GIFT_WORKER_DAEMON_WORKER_GRPC_SERVICE_H_

#include "gift/v1/worker.grpc.pb.h"
#include "worker/daemon/worker_core.h"

namespace gift::worker {

class WorkerGrpcService final : public gift::v1::Worker::Service {
 public:
  explicit WorkerGrpcService(WorkerCore* daemon) : daemon_(daemon) {}

  grpc::Status RegisterBuffers(grpc::ServerContext* context,
                               const gift::v1::RegisterBuffersRequest* request,
                               gift::v1::RegisterBuffersResponse* response) override;
  grpc::Status PushPull(grpc::ServerContext* context, const gift::v1::PushPullRequest* request,
                        gift::v1::PushPullResponse* response) override;
  grpc::Status StartTensors(grpc::ServerContext* context,
                            const gift::v1::StartTensorsRequest* request,
                            gift::v1::StartTensorsResponse* response) override;
  grpc::Status SubmitActivationStats(grpc::ServerContext* context,
                                     const gift::v1::SubmitActivationStatsRequest* request,
                                     gift::v1::SubmitActivationStatsResponse* response) override;
  grpc::Status GetWorkerInfo(grpc::ServerContext* context,
                             const gift::v1::GetWorkerInfoRequest* request,
                             gift::v1::WorkerInfo* response) override;

 private:
  WorkerCore* const daemon_;
};

}  // namespace gift::worker

#endif  // GIFT_WORKER_DAEMON_WORKER_GRPC_SERVICE_H_
