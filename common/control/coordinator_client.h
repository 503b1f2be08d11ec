// A typed client of the Coordinator service (proto/gift/v1/coordinator.proto):
// one method per RPC, each with a deadline, returning absl::Status[Or] whose
// message starts with the RPC's name ("Join: ...") so a caller can tell which
// call failed. Status codes are the coordinator's (see coordinator.proto);
// a coordinator that cannot be reached gives UNAVAILABLE.
//
//   auto channel = CoordinatorClient::MakeChannel("127.0.0.1:7070");
//   CoordinatorClient client(channel, absl::Seconds(10));
//   absl::StatusOr<gift::v1::StatusResponse> status = client.GetStatus();
//
// Ownership: shares the channel. Thread safety: all methods may be called
// concurrently (the gRPC stub is thread-safe and the object is immutable).
#ifndef GIFT_COMMON_CONTROL_COORDINATOR_CLIENT_H_
#define GIFT_COMMON_CONTROL_COORDINATOR_CLIENT_H_

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/security/credentials.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gift/v1/coordinator.grpc.pb.h"

namespace gift::control {

// Basis bytes travel in messages of at most this many data bytes.
inline constexpr size_t kBasisChunkBytes = size_t{1} << 20;

// A basis version as fetched: its header and its bytes, whose size and
// CRC-32C have been checked against the header.
struct FetchedBasis {
  gift::v1::BasisHeader header;
  std::string bytes;
};

class CoordinatorClient {
 public:
  // A plaintext (loopback development) channel to `address`
  // ("host:port", or any gRPC target such as "unix:/path"). Failed connection
  // attempts are retried after 0.1 s, backing off to at most 5 s (gRPC's
  // defaults, 1 s to 120 s, would leave members cut off for minutes after a
  // long coordinator outage).
  static std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address);

  // The same channel with `credentials` (rpc::MakeChannelCredentials: mutual
  // TLS from the member's certificate files, or plaintext).
  static std::shared_ptr<grpc::Channel> MakeChannel(
      const std::string& address, std::shared_ptr<grpc::ChannelCredentials> credentials);

  // Every call gets `timeout` as its deadline; `timeout` > 0.
  CoordinatorClient(std::shared_ptr<grpc::Channel> channel, absl::Duration timeout);

  CoordinatorClient(const CoordinatorClient&) = delete;
  CoordinatorClient& operator=(const CoordinatorClient&) = delete;

  absl::StatusOr<gift::v1::JoinResponse> Join(const gift::v1::JoinRequest& request) const;
  absl::StatusOr<gift::v1::LeaveResponse> Leave(const std::string& member_id) const;
  // `timeout` > 0 replaces the client's timeout for this call (a heartbeat
  // later than the next one is useless).
  absl::StatusOr<gift::v1::HeartbeatResponse> Heartbeat(
      const gift::v1::HeartbeatRequest& request,
      absl::Duration timeout = absl::ZeroDuration()) const;
  absl::StatusOr<gift::v1::RegisterTensorsResponse> RegisterTensors(
      const gift::v1::RegisterTensorsRequest& request) const;
  absl::StatusOr<gift::v1::ReportPeerFailureResponse> ReportPeerFailure(
      const gift::v1::ReportPeerFailureRequest& request) const;

  // Streams `bytes` (the serialized basis; empty when `header.direct`) in
  // chunks of kBasisChunkBytes. Fills header.size_bytes and header.crc32c
  // from `bytes`.
  absl::StatusOr<gift::v1::PublishBasisResponse> PublishBasis(gift::v1::BasisHeader header,
                                                              absl::string_view bytes) const;
  // Fails with DATA_LOSS when the bytes received do not match the header's
  // size or CRC-32C.
  absl::StatusOr<FetchedBasis> FetchBasis(const std::string& member_id, uint64_t tensor_id,
                                          uint64_t version) const;
  absl::StatusOr<gift::v1::AckBasisResponse> AckBasis(const std::string& member_id,
                                                      uint64_t tensor_id, uint64_t version) const;

  absl::StatusOr<gift::v1::Policy> GetPolicy() const;
  absl::StatusOr<gift::v1::Policy> SetPolicy(const gift::v1::Policy& policy,
                                             uint64_t expected_version) const;
  absl::StatusOr<gift::v1::RequestRefreshResponse> RequestRefresh(
      const std::string& tensor_glob) const;
  absl::StatusOr<gift::v1::SetRankResponse> SetRank(uint32_t rank,
                                                    const std::string& tensor_glob) const;
  absl::StatusOr<gift::v1::StatusResponse> GetStatus() const;
  absl::StatusOr<gift::v1::DrainResponse> Drain(const gift::v1::DrainRequest& request) const;
  absl::StatusOr<gift::v1::StartRunResponse> StartRun(
      const gift::v1::StartRunRequest& request) const;
  // The data-plane keys of the peers member `member_id` verifies (secrets).
  absl::StatusOr<gift::v1::DataPlaneKeys> GetDataPlaneKeys(const std::string& member_id) const;

  // Opens a Watch stream without a deadline; the caller owns `context` (and
  // cancels it with TryCancel to end the stream) and reads until Read fails.
  std::unique_ptr<grpc::ClientReader<gift::v1::ClusterState>> Watch(
      grpc::ClientContext* context, const gift::v1::WatchRequest& request) const;

  gift::v1::Coordinator::Stub& stub() const { return *stub_; }
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }
  absl::Duration timeout() const { return timeout_; }

 private:
  // Sets the deadline of `context` to now + timeout_.
  void SetDeadline(grpc::ClientContext* context) const;

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<gift::v1::Coordinator::Stub> stub_;
  absl::Duration timeout_;
};

}  // namespace gift::control

#endif  // GIFT_COMMON_CONTROL_COORDINATOR_CLIENT_H_
