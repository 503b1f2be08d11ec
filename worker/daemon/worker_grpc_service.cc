#include "worker/daemon/worker_grpc_service.h"

#include "common/rpc/grpc_status.h"

namespace gift::worker {
namespace {

template <typename T>
grpc::Status Reply(absl::StatusOr<T> result, T* response) {
  if (!result.ok()) return rpc::ToGrpcStatus(result.status());
  *response = *std::move(result);
  return grpc::Status::OK;
}

}  // namespace

grpc::Status WorkerGrpcService::RegisterBuffers(grpc::ServerContext*,
                                                const gift::v1::RegisterBuffersRequest* request,
                                                gift::v1::RegisterBuffersResponse* response) {
  return Reply(daemon_->RegisterBuffers(*request), response);
}

grpc::Status WorkerGrpcService::PushPull(grpc::ServerContext*,
                                         const gift::v1::PushPullRequest* request,
                                         gift::v1::PushPullResponse* response) {
  return Reply(daemon_->PushPull(*request), response);
}

grpc::Status WorkerGrpcService::StartTensors(grpc::ServerContext*,
                                             const gift::v1::StartTensorsRequest* request,
                                             gift::v1::StartTensorsResponse*) {
  return rpc::ToGrpcStatus(daemon_->StartTensors(*request));
}

grpc::Status WorkerGrpcService::SubmitActivationStats(
    grpc::ServerContext*, const gift::v1::SubmitActivationStatsRequest* request,
    gift::v1::SubmitActivationStatsResponse*) {
  return rpc::ToGrpcStatus(daemon_->SubmitActivationStats(*request));
}

grpc::Status WorkerGrpcService::GetWorkerInfo(grpc::ServerContext*,
                                              const gift::v1::GetWorkerInfoRequest*,
                                              gift::v1::WorkerInfo* response) {
  *response = daemon_->Info();
  return grpc::Status::OK;
}

}  // namespace gift::worker
