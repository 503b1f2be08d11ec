#include "common/control/coordinator_client.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/crc32c.h"
#include "common/rpc/grpc_status.h"

namespace gift::control {

namespace v1 = ::gift::v1;

std::shared_ptr<grpc::Channel> CoordinatorClient::MakeChannel(const std::string& address) {
  return MakeChannel(address, grpc::InsecureChannelCredentials());
}

std::shared_ptr<grpc::Channel> CoordinatorClient::MakeChannel(
    const std::string& address, std::shared_ptr<grpc::ChannelCredentials> credentials) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 5000);
  return grpc::CreateCustomChannel(address, std::move(credentials), args);
}

CoordinatorClient::CoordinatorClient(std::shared_ptr<grpc::Channel> channel, absl::Duration timeout)
    : channel_(std::move(channel)), stub_(v1::Coordinator::NewStub(channel_)), timeout_(timeout) {}

void CoordinatorClient::SetDeadline(grpc::ClientContext* context) const {
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
}

namespace {

// Runs one unary call with a deadline and converts its status.
template <typename Response, typename Request, typename Method>
absl::StatusOr<Response> Unary(const CoordinatorClient& client, absl::string_view name,
                               Method method, const Request& request,
                               absl::Duration timeout = absl::ZeroDuration()) {
  grpc::ClientContext context;
  if (timeout <= absl::ZeroDuration()) timeout = client.timeout();
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  Response response;
  const grpc::Status status = (client.stub().*method)(&context, request, &response);
  if (!status.ok()) return rpc::FromGrpcStatus(status, name);
  return response;
}

}  // namespace

absl::StatusOr<v1::JoinResponse> CoordinatorClient::Join(const v1::JoinRequest& request) const {
  return Unary<v1::JoinResponse>(*this, "Join", &v1::Coordinator::Stub::Join, request);
}

absl::StatusOr<v1::LeaveResponse> CoordinatorClient::Leave(const std::string& member_id) const {
  v1::LeaveRequest request;
  request.set_member_id(member_id);
  return Unary<v1::LeaveResponse>(*this, "Leave", &v1::Coordinator::Stub::Leave, request);
}

absl::StatusOr<v1::HeartbeatResponse> CoordinatorClient::Heartbeat(
    const v1::HeartbeatRequest& request, absl::Duration timeout) const {
  return Unary<v1::HeartbeatResponse>(*this, "Heartbeat", &v1::Coordinator::Stub::Heartbeat,
                                      request, timeout);
}

absl::StatusOr<v1::RegisterTensorsResponse> CoordinatorClient::RegisterTensors(
    const v1::RegisterTensorsRequest& request) const {
  return Unary<v1::RegisterTensorsResponse>(*this, "RegisterTensors",
                                            &v1::Coordinator::Stub::RegisterTensors, request);
}

absl::StatusOr<v1::ReportPeerFailureResponse> CoordinatorClient::ReportPeerFailure(
    const v1::ReportPeerFailureRequest& request) const {
  return Unary<v1::ReportPeerFailureResponse>(*this, "ReportPeerFailure",
                                              &v1::Coordinator::Stub::ReportPeerFailure, request);
}

absl::StatusOr<v1::PublishBasisResponse> CoordinatorClient::PublishBasis(
    v1::BasisHeader header, absl::string_view bytes) const {
  header.set_size_bytes(bytes.size());
  header.set_crc32c(crc32c::Value(bytes.data(), bytes.size()));
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::PublishBasisResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::PublishBasisRequest>> writer =
      stub_->PublishBasis(&context, &response);
  v1::PublishBasisRequest message;
  *message.mutable_header() = std::move(header);
  size_t offset = 0;
  do {
    const size_t n = std::min(kBasisChunkBytes, bytes.size() - offset);
    message.set_data(bytes.data() + offset, n);
    offset += n;
    // A failed write means the stream is broken; Finish reports why.
    if (!writer->Write(message)) break;
    message.clear_header();
  } while (offset < bytes.size());
  writer->WritesDone();
  const grpc::Status status = writer->Finish();
  if (!status.ok()) return rpc::FromGrpcStatus(status, "PublishBasis");
  return response;
}

absl::StatusOr<FetchedBasis> CoordinatorClient::FetchBasis(const std::string& member_id,
                                                           uint64_t tensor_id,
                                                           uint64_t version) const {
  v1::FetchBasisRequest request;
  request.set_member_id(member_id);
  request.set_tensor_id(tensor_id);
  request.set_version(version);
  grpc::ClientContext context;
  SetDeadline(&context);
  std::unique_ptr<grpc::ClientReader<v1::BasisChunk>> reader = stub_->FetchBasis(&context, request);
  FetchedBasis fetched;
  bool have_header = false;
  v1::BasisChunk chunk;
  while (reader->Read(&chunk)) {
    if (chunk.has_header()) {
      fetched.header = chunk.header();
      have_header = true;
      fetched.bytes.reserve(fetched.header.size_bytes());
    }
    fetched.bytes.append(chunk.data());
  }
  const grpc::Status status = reader->Finish();
  if (!status.ok()) return rpc::FromGrpcStatus(status, "FetchBasis");
  if (!have_header) {
    return absl::DataLossError(absl::StrCat("FetchBasis: tensor ", tensor_id, " version ", version,
                                            ": the stream carried no header"));
  }
  if (fetched.bytes.size() != fetched.header.size_bytes()) {
    return absl::DataLossError(absl::StrCat("FetchBasis: tensor ", tensor_id, " version ", version,
                                            ": received ", fetched.bytes.size(),
                                            " bytes, header says ", fetched.header.size_bytes()));
  }
  const uint32_t crc = crc32c::Value(fetched.bytes.data(), fetched.bytes.size());
  if (crc != fetched.header.crc32c()) {
    return absl::DataLossError(absl::StrCat("FetchBasis: tensor ", tensor_id, " version ", version,
                                            ": CRC-32C ", crc, " of the bytes received, ",
                                            "header says ", fetched.header.crc32c()));
  }
  return fetched;
}

absl::StatusOr<v1::AckBasisResponse> CoordinatorClient::AckBasis(const std::string& member_id,
                                                                 uint64_t tensor_id,
                                                                 uint64_t version) const {
  v1::AckBasisRequest request;
  request.set_member_id(member_id);
  request.set_tensor_id(tensor_id);
  request.set_version(version);
  return Unary<v1::AckBasisResponse>(*this, "AckBasis", &v1::Coordinator::Stub::AckBasis, request);
}

absl::StatusOr<v1::Policy> CoordinatorClient::GetPolicy() const {
  return Unary<v1::Policy>(*this, "GetPolicy", &v1::Coordinator::Stub::GetPolicy,
                           v1::GetPolicyRequest());
}

absl::StatusOr<v1::Policy> CoordinatorClient::SetPolicy(const v1::Policy& policy,
                                                        uint64_t expected_version) const {
  v1::SetPolicyRequest request;
  *request.mutable_policy() = policy;
  request.set_expected_version(expected_version);
  return Unary<v1::Policy>(*this, "SetPolicy", &v1::Coordinator::Stub::SetPolicy, request);
}

absl::StatusOr<v1::RequestRefreshResponse> CoordinatorClient::RequestRefresh(
    const std::string& tensor_glob) const {
  v1::RequestRefreshRequest request;
  request.set_tensor_glob(tensor_glob);
  return Unary<v1::RequestRefreshResponse>(*this, "RequestRefresh",
                                           &v1::Coordinator::Stub::RequestRefresh, request);
}

absl::StatusOr<v1::SetRankResponse> CoordinatorClient::SetRank(
    uint32_t rank, const std::string& tensor_glob) const {
  v1::SetRankRequest request;
  request.set_rank(rank);
  request.set_tensor_glob(tensor_glob);
  return Unary<v1::SetRankResponse>(*this, "SetRank", &v1::Coordinator::Stub::SetRank, request);
}

absl::StatusOr<v1::StatusResponse> CoordinatorClient::GetStatus() const {
  return Unary<v1::StatusResponse>(*this, "GetStatus", &v1::Coordinator::Stub::GetStatus,
                                   v1::GetStatusRequest());
}

absl::StatusOr<v1::DrainResponse> CoordinatorClient::Drain(const v1::DrainRequest& request) const {
  return Unary<v1::DrainResponse>(*this, "Drain", &v1::Coordinator::Stub::Drain, request);
}

absl::StatusOr<v1::StartRunResponse> CoordinatorClient::StartRun(
    const v1::StartRunRequest& request) const {
  return Unary<v1::StartRunResponse>(*this, "StartRun", &v1::Coordinator::Stub::StartRun, request);
}

absl::StatusOr<v1::DataPlaneKeys> CoordinatorClient::GetDataPlaneKeys(
    const std::string& member_id) const {
  v1::GetDataPlaneKeysRequest request;
  request.set_member_id(member_id);
  return Unary<v1::DataPlaneKeys>(*this, "GetDataPlaneKeys",
                                  &v1::Coordinator::Stub::GetDataPlaneKeys, request);
}

std::unique_ptr<grpc::ClientReader<v1::ClusterState>> CoordinatorClient::Watch(
    grpc::ClientContext* context, const v1::WatchRequest& request) const {
  return stub_->Watch(context, request);
}

}  // namespace gift::control
