// Fuzzes the gift.v1.Coordinator service (server/coordinator/
// coordinator_service.h) in-process: each input is a gift.fuzz.
// CoordinatorInput (fuzz_inputs.proto), a sequence of requests sent to a
// fresh coordinator (a new state, SQLite file and service behind the one
// gRPC server of the process: InprocCoordinator::Reset) through a real gRPC
// call each (InProcessChannel), so the handlers run exactly as they do
// behind a port:
// unary calls, the PublishBasis and FetchBasis streams, Watch. Every request
// must get a status back: OK or a proper error code, never a crash, never
// UNKNOWN or INTERNAL (which would mean an unmapped failure).
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/base/crc32c.h"
#include "tests/fuzz/fuzz_flags.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/fuzz_inputs.pb.h"
#include "tests/fuzz/inproc_coordinator.h"

namespace {

using gift::fuzz::CoordinatorCall;

constexpr int kMaxCalls = 64;

std::unique_ptr<grpc::ClientContext> Context() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  return context;
}

void CheckStatus(const grpc::Status& status, const char* rpc) {
  // DEADLINE_EXCEEDED would be a hung handler: worth a crash as well.
  if (status.error_code() == grpc::StatusCode::UNKNOWN ||
      status.error_code() == grpc::StatusCode::INTERNAL ||
      status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    std::fprintf(stderr, "%s: %d %s\n", rpc, static_cast<int>(status.error_code()),
                 status.error_message().c_str());
    gift::fuzz::Fail("a coordinator RPC failed without a proper status code");
  }
}

grpc::Status Publish(gift::v1::Coordinator::Stub* stub, gift::fuzz::PublishBasisCall call) {
  if (call.messages_size() == 0) call.add_messages();
  if (call.fix_header()) {
    std::string all;
    for (const auto& m : call.messages()) all += m.data();
    gift::v1::BasisHeader* h = call.mutable_messages(0)->mutable_header();
    h->set_size_bytes(all.size());
    h->set_crc32c(gift::crc32c::Value(all.data(), all.size()));
  }
  auto context = Context();
  gift::v1::PublishBasisResponse response;
  auto writer = stub->PublishBasis(context.get(), &response);
  for (const auto& m : call.messages()) {
    if (!writer->Write(m)) break;  // the server finished early (a refusal)
  }
  writer->WritesDone();
  return writer->Finish();
}

grpc::Status Fetch(gift::v1::Coordinator::Stub* stub, const gift::v1::FetchBasisRequest& request) {
  auto context = Context();
  auto reader = stub->FetchBasis(context.get(), request);
  gift::v1::BasisChunk chunk;
  while (reader->Read(&chunk)) {
  }
  return reader->Finish();
}

void WatchOnce(gift::v1::Coordinator::Stub* stub, gift::v1::WatchRequest request) {
  // A watch that would wait for a later revision is not waited for.
  request.set_after_revision(0);
  auto context = Context();
  auto reader = stub->Watch(context.get(), request);
  gift::v1::ClusterState state;
  if (!reader->Read(&state)) CheckStatus(reader->Finish(), "Watch");
  context->TryCancel();
  while (reader->Read(&state)) {
  }
  (void)reader->Finish();
}

}  // namespace

// ASan's allocation stacks were 6 % of this harness's samples deep in its
// corpus (fuzz_flags.h says how to see them when replaying a report).
GIFT_FUZZ_LIGHT_ASAN_STACKS()

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  gift::fuzz::PrependDefaultFlags(argc, argv, {"-detect_leaks=0", "-entropic=0", "-reload=0"});
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gift::fuzz::CoordinatorInput input;
  if (!input.ParseFromArray(data, static_cast<int>(size))) return 0;
  if (input.calls_size() > kMaxCalls) return 0;
  static gift::fuzz::InprocCoordinator* const coordinator = new gift::fuzz::InprocCoordinator();
  coordinator->Reset();
  gift::v1::Coordinator::Stub* stub = coordinator->stub();
  std::vector<std::string> members;

  for (CoordinatorCall call : input.calls()) {
    if (call.advance_ms() != 0) {
      coordinator->clock()->Advance(absl::Milliseconds(call.advance_ms()));
      if (!coordinator->state()->ExpireLeases().ok()) {
        gift::fuzz::Fail("ExpireLeases failed on a healthy store");
      }
    }
    std::string member;
    if (call.member_ref() != 0 && !members.empty()) {
      member = members[(call.member_ref() - 1) % members.size()];
    }
    const bool ref = !member.empty();
    switch (call.call_case()) {
      case CoordinatorCall::kJoin: {
        gift::v1::JoinResponse response;
        const grpc::Status s = stub->Join(Context().get(), call.join(), &response);
        CheckStatus(s, "Join");
        if (s.ok()) members.push_back(response.member_id());
        break;
      }
      case CoordinatorCall::kLeave: {
        if (ref) call.mutable_leave()->set_member_id(member);
        gift::v1::LeaveResponse response;
        CheckStatus(stub->Leave(Context().get(), call.leave(), &response), "Leave");
        break;
      }
      case CoordinatorCall::kHeartbeat: {
        if (ref) call.mutable_heartbeat()->set_member_id(member);
        gift::v1::HeartbeatResponse response;
        CheckStatus(stub->Heartbeat(Context().get(), call.heartbeat(), &response), "Heartbeat");
        break;
      }
      case CoordinatorCall::kRegisterTensors: {
        if (ref) call.mutable_register_tensors()->set_member_id(member);
        gift::v1::RegisterTensorsResponse response;
        CheckStatus(stub->RegisterTensors(Context().get(), call.register_tensors(), &response),
                    "RegisterTensors");
        break;
      }
      case CoordinatorCall::kPublishBasis: {
        gift::fuzz::PublishBasisCall publish = call.publish_basis();
        if (ref) {
          if (publish.messages_size() == 0) publish.add_messages();
          publish.mutable_messages(0)->mutable_header()->set_member_id(member);
        }
        CheckStatus(Publish(stub, std::move(publish)), "PublishBasis");
        break;
      }
      case CoordinatorCall::kFetchBasis: {
        if (ref) call.mutable_fetch_basis()->set_member_id(member);
        CheckStatus(Fetch(stub, call.fetch_basis()), "FetchBasis");
        break;
      }
      case CoordinatorCall::kAckBasis: {
        if (ref) call.mutable_ack_basis()->set_member_id(member);
        gift::v1::AckBasisResponse response;
        CheckStatus(stub->AckBasis(Context().get(), call.ack_basis(), &response), "AckBasis");
        break;
      }
      case CoordinatorCall::kGetPolicy: {
        gift::v1::Policy response;
        CheckStatus(stub->GetPolicy(Context().get(), call.get_policy(), &response), "GetPolicy");
        break;
      }
      case CoordinatorCall::kSetPolicy: {
        gift::v1::Policy response;
        CheckStatus(stub->SetPolicy(Context().get(), call.set_policy(), &response), "SetPolicy");
        break;
      }
      case CoordinatorCall::kRequestRefresh: {
        gift::v1::RequestRefreshResponse response;
        CheckStatus(stub->RequestRefresh(Context().get(), call.request_refresh(), &response),
                    "RequestRefresh");
        break;
      }
      case CoordinatorCall::kSetRank: {
        gift::v1::SetRankResponse response;
        CheckStatus(stub->SetRank(Context().get(), call.set_rank(), &response), "SetRank");
        break;
      }
      case CoordinatorCall::kGetStatus: {
        gift::v1::StatusResponse response;
        CheckStatus(stub->GetStatus(Context().get(), call.get_status(), &response), "GetStatus");
        break;
      }
      case CoordinatorCall::kDrain: {
        if (ref) call.mutable_drain()->set_member_id(member);
        gift::v1::DrainResponse response;
        CheckStatus(stub->Drain(Context().get(), call.drain(), &response), "Drain");
        break;
      }
      case CoordinatorCall::kWatch: {
        if (ref) call.mutable_watch()->set_member_id(member);
        WatchOnce(stub, call.watch());
        break;
      }
      case CoordinatorCall::CALL_NOT_SET:
        break;
    }
  }
  return 0;
}
