// Per-RPC role checks for services whose RPCs need different roles (the
// Coordinator): the caller's role comes from its TLS certificate
// (common/rpc/credentials.h).
//
//   if (grpc::Status denied = CheckRole(*context, "SetPolicy", {Role::kOperator});
//       !denied.ok()) {
//     return FinishUnary(context, denied);
//   }
//
// Calls over a plaintext endpoint carry no identity and pass every check: a
// daemon serves plaintext only on loopback or with the operator's --insecure
// (CheckPlaintextAllowed), which is the development mode.
//
// Thread safety: plain functions; the reactors are single-use and delete
// themselves when gRPC is done with them.
#ifndef GIFT_COMMON_RPC_ROLE_CHECK_H_
#define GIFT_COMMON_RPC_ROLE_CHECK_H_

#include <grpcpp/server_context.h>
#include <grpcpp/support/server_callback.h>

#include <initializer_list>
#include <utility>

#include "absl/strings/string_view.h"
#include "common/rpc/credentials.h"

namespace gift::rpc {

// OK for a plaintext call or a TLS peer whose role is in `allowed`; otherwise
// PERMISSION_DENIED naming the RPC, the caller's role and the allowed ones:
//   "role worker may not call SetPolicy (allowed: operator)"
// (clients prepend the RPC's name, see grpc_status.h)
// and logs an `rpc_denied` warning with the peer's address. An empty
// `allowed` denies every TLS peer.
grpc::Status CheckRole(const grpc::ServerContextBase& context, absl::string_view rpc,
                       std::initializer_list<Role> allowed);

// Finishes a unary callback call with `status` and returns its reactor.
inline grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* context,
                                             grpc::Status status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(std::move(status));
  return reactor;
}

// A server-streaming reactor that only finishes with `status`.
template <typename Message>
class RefusedWriter final : public grpc::ServerWriteReactor<Message> {
 public:
  explicit RefusedWriter(grpc::Status status) { this->Finish(std::move(status)); }
  void OnDone() override { delete this; }
};

// A client-streaming reactor that only finishes with `status`.
template <typename Message>
class RefusedReader final : public grpc::ServerReadReactor<Message> {
 public:
  explicit RefusedReader(grpc::Status status) { this->Finish(std::move(status)); }
  void OnDone() override { delete this; }
};

}  // namespace gift::rpc

#endif  // GIFT_COMMON_RPC_ROLE_CHECK_H_
