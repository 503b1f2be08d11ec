#include "server/coordinator/basis_ledger.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"

namespace gift::coordinator {
namespace {

using gift::logging::Level;
using gift::logging::Log;

}  // namespace

void BasisLedger::Reset(std::vector<gift::v1::TensorBasisState> bases) {
  bases_.clear();
  bytes_.clear();
  for (gift::v1::TensorBasisState& b : bases) {
    const uint64_t id = b.tensor_id();
    bases_[id] = std::move(b);
  }
  ClearChanges();
}

void BasisLedger::DropAll() {
  bases_.clear();
  bytes_.clear();
  ClearChanges();
}

void BasisLedger::AddTensor(uint64_t tensor_id) {
  gift::v1::TensorBasisState& basis = bases_[tensor_id];
  basis.set_tensor_id(tensor_id);
  gift::v1::BasisVersion& v0 = *basis.add_versions();
  v0.set_version(0);
  v0.set_activation_step(0);
  v0.set_direct(true);
  put_bases_.insert(tensor_id);
}

absl::StatusOr<gift::v1::TensorBasisState*> BasisLedger::Find(uint64_t tensor_id) {
  auto it = bases_.find(tensor_id);
  if (it == bases_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown tensor id ", tensor_id));
  }
  return &it->second;
}

uint64_t BasisLedger::LastVersion(const gift::v1::TensorBasisState& basis) {
  uint64_t last = 0;
  for (const gift::v1::BasisVersion& v : basis.versions()) last = std::max(last, v.version());
  if (basis.has_proposal()) last = std::max(last, basis.proposal().version());
  return last;
}

void BasisLedger::SetOwner(uint64_t tensor_id, const std::string& member_id) {
  bases_[tensor_id].set_owner_member_id(member_id);
  put_bases_.insert(tensor_id);
}

void BasisLedger::RequestRefresh(uint64_t tensor_id) {
  gift::v1::TensorBasisState& basis = bases_[tensor_id];
  basis.set_refresh_requests(basis.refresh_requests() + 1);
  put_bases_.insert(tensor_id);
}

void BasisLedger::Propose(const gift::v1::BasisHeader& header, uint64_t tentative_step,
                          std::shared_ptr<const std::string> bytes) {
  gift::v1::TensorBasisState& basis = bases_[header.tensor_id()];
  if (basis.has_proposal()) {
    // The newest version wins: the pending one is dropped with its bytes.
    Log(Level::kInfo, "basis_superseded",
        {{"tensor_id", header.tensor_id()},
         {"version", basis.proposal().version()},
         {"by", header.version()}});
    DropBytes(header.tensor_id(), basis.proposal().version());
  }
  gift::v1::BasisProposal& p = *basis.mutable_proposal();
  p.Clear();
  p.set_version(header.version());
  p.set_tentative_activation_step(tentative_step);
  p.set_state(gift::v1::BASIS_PROPOSAL_STATE_WAITING_FOR_ACKS);
  p.add_acked_member_ids(header.member_id());  // the publisher has the bytes
  p.set_rank(header.rank());
  p.set_size_bytes(header.size_bytes());
  p.set_crc32c(header.crc32c());
  p.set_direct(header.direct());
  if (header.has_push_codec()) *p.mutable_push_codec() = header.push_codec();
  if (header.has_pull_codec()) *p.mutable_pull_codec() = header.pull_codec();
  if (!header.direct()) {
    const Key key(header.tensor_id(), header.version());
    bytes_[key] = bytes;
    delete_bytes_.erase(key);
    put_bytes_[key] = std::move(bytes);
  }
  put_bases_.insert(header.tensor_id());
  Log(Level::kInfo, "basis_published",
      {{"tensor_id", header.tensor_id()},
       {"version", header.version()},
       {"size_bytes", header.size_bytes()},
       {"activation_step", tentative_step}});
}

bool BasisLedger::Ack(uint64_t tensor_id, uint64_t version, const std::string& member_id) {
  auto it = bases_.find(tensor_id);
  if (it == bases_.end()) return false;
  gift::v1::TensorBasisState& basis = it->second;
  if (!basis.has_proposal() || basis.proposal().version() != version) return false;
  gift::v1::BasisProposal& p = *basis.mutable_proposal();
  const auto& acked = p.acked_member_ids();
  if (std::find(acked.begin(), acked.end(), member_id) != acked.end()) return false;
  p.add_acked_member_ids(member_id);
  put_bases_.insert(tensor_id);
  return true;
}

bool BasisLedger::MaybeCommit(gift::v1::TensorBasisState* basis,
                              const std::set<std::string>& workers) {
  if (!basis->has_proposal()) return false;
  const gift::v1::BasisProposal& p = basis->proposal();
  std::set<std::string> acked(p.acked_member_ids().begin(), p.acked_member_ids().end());
  for (const std::string& id : workers) {
    if (acked.count(id) == 0) return false;
  }
  // Invariant: a pending tentative step is above frozen_through_step.
  gift::v1::BasisVersion& v = *basis->add_versions();
  v.set_version(p.version());
  v.set_activation_step(p.tentative_activation_step());
  v.set_rank(p.rank());
  v.set_size_bytes(p.size_bytes());
  v.set_crc32c(p.crc32c());
  v.set_direct(p.direct());
  if (p.has_push_codec()) *v.mutable_push_codec() = p.push_codec();
  if (p.has_pull_codec()) *v.mutable_pull_codec() = p.pull_codec();
  Log(Level::kInfo, "basis_committed",
      {{"tensor_id", basis->tensor_id()},
       {"version", v.version()},
       {"activation_step", v.activation_step()},
       {"postponements", p.postponements()}});
  basis->clear_proposal();
  ++counters_.commits;
  put_bases_.insert(basis->tensor_id());
  return true;
}

bool BasisLedger::MaybeCommitAll(const std::set<std::string>& workers) {
  bool changed = false;
  for (auto& [tid, basis] : bases_) changed |= MaybeCommit(&basis, workers);
  return changed;
}

bool BasisLedger::Postpone(uint64_t frozen_through_step, uint64_t lead_steps) {
  bool changed = false;
  for (auto& [tid, basis] : bases_) {
    if (!basis.has_proposal()) continue;
    gift::v1::BasisProposal& p = *basis.mutable_proposal();
    if (p.tentative_activation_step() > frozen_through_step) continue;
    p.set_tentative_activation_step(frozen_through_step + lead_steps);
    p.set_postponements(p.postponements() + 1);
    ++counters_.postponements;
    put_bases_.insert(tid);
    changed = true;
    Log(Level::kInfo, "basis_postponed",
        {{"tensor_id", tid},
         {"version", p.version()},
         {"activation_step", p.tentative_activation_step()},
         {"acks", p.acked_member_ids_size()}});
  }
  return changed;
}

bool BasisLedger::Prune(gift::v1::TensorBasisState* basis, uint64_t min_next_step) {
  auto* versions = basis->mutable_versions();
  int drop = 0;
  while (drop + 1 < versions->size() && (*versions)[drop + 1].activation_step() <= min_next_step) {
    ++drop;
  }
  if (drop == 0) return false;
  for (int i = 0; i < drop; ++i) DropBytes(basis->tensor_id(), (*versions)[i].version());
  versions->erase(versions->begin(), versions->begin() + drop);
  put_bases_.insert(basis->tensor_id());
  return true;
}

bool BasisLedger::PruneAll(uint64_t min_next_step) {
  bool changed = false;
  for (auto& [tid, basis] : bases_) changed |= Prune(&basis, min_next_step);
  return changed;
}

absl::StatusOr<gift::v1::BasisHeader> BasisLedger::Header(uint64_t tensor_id, uint64_t version) {
  auto it = bases_.find(tensor_id);
  if (it == bases_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown tensor id ", tensor_id));
  }
  const gift::v1::TensorBasisState& basis = it->second;
  gift::v1::BasisHeader h;
  h.set_member_id(basis.owner_member_id());
  h.set_tensor_id(tensor_id);
  h.set_version(version);
  bool found = false;
  if (basis.has_proposal() && basis.proposal().version() == version) {
    const gift::v1::BasisProposal& p = basis.proposal();
    h.set_rank(p.rank());
    h.set_direct(p.direct());
    if (p.has_push_codec()) *h.mutable_push_codec() = p.push_codec();
    if (p.has_pull_codec()) *h.mutable_pull_codec() = p.pull_codec();
    h.set_size_bytes(p.size_bytes());
    h.set_crc32c(p.crc32c());
    found = true;
  }
  for (const gift::v1::BasisVersion& v : basis.versions()) {
    if (v.version() != version) continue;
    h.set_rank(v.rank());
    h.set_direct(v.direct());
    if (v.has_push_codec()) *h.mutable_push_codec() = v.push_codec();
    if (v.has_pull_codec()) *h.mutable_pull_codec() = v.pull_codec();
    h.set_size_bytes(v.size_bytes());
    h.set_crc32c(v.crc32c());
    found = true;
  }
  if (!found) {
    return absl::NotFoundError(
        absl::StrCat("tensor ", tensor_id, " has no basis version ", version));
  }
  return h;
}

std::shared_ptr<const std::string> BasisLedger::CachedBytes(uint64_t tensor_id,
                                                            uint64_t version) const {
  auto it = bytes_.find(Key(tensor_id, version));
  return it != bytes_.end() ? it->second : nullptr;
}

void BasisLedger::CacheBytes(uint64_t tensor_id, uint64_t version,
                             std::shared_ptr<const std::string> bytes) {
  bytes_.emplace(Key(tensor_id, version), std::move(bytes));
}

void BasisLedger::DropBytes(uint64_t tensor_id, uint64_t version) {
  const Key key(tensor_id, version);
  bytes_.erase(key);
  put_bytes_.erase(key);
  delete_bytes_.insert(key);
}

void BasisLedger::AddChangesTo(StoreMutation* mutation) const {
  for (uint64_t id : put_bases_) {
    auto it = bases_.find(id);
    if (it != bases_.end()) mutation->put_bases.push_back(it->second);
  }
  for (const auto& [key, bytes] : put_bytes_) {
    mutation->put_basis_bytes.push_back({key.first, key.second, bytes});
  }
  mutation->delete_basis_bytes.assign(delete_bytes_.begin(), delete_bytes_.end());
}

void BasisLedger::ClearChanges() {
  put_bases_.clear();
  put_bytes_.clear();
  delete_bytes_.clear();
}

}  // namespace gift::coordinator
