// giftctl run, giftctl run reset.
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "common/rpc/run_clients.h"
#include "tools/giftctl/commands.h"
#include "tools/giftctl/output.h"

namespace gift::giftctl {

namespace v1 = ::gift::v1;

namespace {

// What the workers say of the run's training clients (Member.client).
std::string RunClients(const v1::ClusterState& state) {
  int connected = 0, left = 0;
  for (const v1::Member& w : state.workers()) {
    if (!rpc::ReportsClientOfRun(w, state.run().generation())) continue;
    ++(w.client().connected() ? connected : left);
  }
  if (connected + left == 0) return "none registered";
  if (connected == 0) {
    return absl::StrCat("all ", left,
                        " disconnected: a registration without a run id starts a new run");
  }
  return absl::StrCat(connected, " connected, ", left, " disconnected");
}

void PrintRun(const CommandContext& ctx, const v1::RunState& run,
              const v1::ClusterState* state = nullptr) {
  if (ctx.json) {
    ctx.out << ProtoJson(run).dump(2) << '\n';
    return;
  }
  Table t({"FIELD", "VALUE"});
  t.Add({"run", Or(run.run_id())});
  t.Add({"generation", absl::StrCat(run.generation())});
  t.Add({"step 0 is cluster step", absl::StrCat(run.base_step())});
  t.Add({"started",
         run.started_unix_ms() == 0
             ? "-"
             : absl::FormatTime(absl::RFC3339_sec, absl::FromUnixMillis(run.started_unix_ms()),
                                absl::UTCTimeZone())});
  if (state != nullptr) t.Add({"training clients", RunClients(*state)});
  t.Print(ctx.out);
}

}  // namespace

absl::Status RunShowCommand(const CommandContext& ctx) {
  absl::StatusOr<v1::StatusResponse> status = ctx.client.GetStatus();
  if (!status.ok()) return status.status();
  PrintRun(ctx, status->state().run(), &status->state());
  return absl::OkStatus();
}

absl::Status RunResetCommand(const CommandContext& ctx, const std::string& run_id) {
  v1::StartRunRequest request;
  request.set_run_id(run_id.empty() ? absl::StrCat("giftctl-", absl::ToUnixMillis(absl::Now()))
                                    : run_id);
  absl::StatusOr<v1::StartRunResponse> response = ctx.client.StartRun(request);
  if (!response.ok()) return response.status();
  if (ctx.json) {
    ctx.out << ProtoJson(*response).dump(2) << '\n';
    return absl::OkStatus();
  }
  if (!response->started()) {
    ctx.out << "run '" << response->run().run_id() << "' is the current run already\n";
    return absl::OkStatus();
  }
  ctx.out << "started run '" << response->run().run_id() << "' (generation "
          << response->run().generation() << "); dropped " << response->dropped_tensors_size()
          << " tensors: the training processes register theirs again and begin at step 0\n";
  return absl::OkStatus();
}

}  // namespace gift::giftctl
