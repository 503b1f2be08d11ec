#include "worker/owner/basis_store.h"

#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/transform/basis_serialization.h"
#include "common/transform/tensor_basis_transform.h"

namespace gift::worker {

absl::StatusOr<std::shared_ptr<const transform::GradientTransform>> BasisStore::Get(
    uint64_t tensor_id, uint64_t version) {
  {
    absl::MutexLock lock(&mu_);
    auto it = cache_.find(Key{tensor_id, version});
    if (it != cache_.end()) return it->second;
  }
  auto fetched = session_->FetchBasis(tensor_id, version);
  if (!fetched.ok()) return fetched.status();
  if (fetched->header.direct()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", tensor_id, " version ", version, " is direct: it has no basis"));
  }
  auto basis = transform::ParseTensorBasis(fetched->bytes);
  if (!basis.ok()) {
    return absl::Status(basis.status().code(),
                        absl::StrCat("tensor ", tensor_id, " basis version ", version, ": ",
                                     basis.status().message()));
  }
  if (basis->header().tensor_id != tensor_id || basis->header().version != version) {
    return absl::DataLossError(absl::StrCat("fetched tensor ", tensor_id, " version ", version,
                                            " but the bytes are tensor ", basis->header().tensor_id,
                                            " version ", basis->header().version));
  }
  auto transform = std::make_shared<const transform::TensorBasisTransform>(*std::move(basis));
  absl::MutexLock lock(&mu_);
  return cache_.try_emplace(Key{tensor_id, version}, std::move(transform)).first->second;
}

void BasisStore::Put(uint64_t tensor_id, uint64_t version,
                     std::shared_ptr<const transform::GradientTransform> transform) {
  absl::MutexLock lock(&mu_);
  cache_[Key{tensor_id, version}] = std::move(transform);
}

absl::Status BasisStore::Sync(const gift::v1::ClusterState& state) {
  const std::string member = session_->member_id();
  absl::Status first;
  absl::flat_hash_set<Key> listed;
  for (const gift::v1::TensorBasisState& basis : state.bases()) {
    for (const gift::v1::BasisVersion& v : basis.versions()) {
      listed.insert(Key{basis.tensor_id(), v.version()});
    }
    if (!basis.has_proposal()) continue;
    const gift::v1::BasisProposal& p = basis.proposal();
    listed.insert(Key{basis.tensor_id(), p.version()});
    const auto ack_key = std::make_tuple(member, basis.tensor_id(), p.version());
    {
      absl::MutexLock lock(&mu_);
      if (acked_.contains(ack_key)) continue;
    }
    if (!p.direct()) {
      auto t = Get(basis.tensor_id(), p.version());
      if (!t.ok()) {
        if (first.ok()) first = t.status();
        continue;
      }
    }
    auto acked = session_->AckBasis(basis.tensor_id(), p.version());
    // FailedPrecondition / NotFound: the proposal was replaced or committed
    // meanwhile; the next state says what holds.
    if (!acked.ok() && acked.status().code() != absl::StatusCode::kFailedPrecondition &&
        acked.status().code() != absl::StatusCode::kNotFound) {
      if (first.ok()) first = acked.status();
      continue;
    }
    absl::MutexLock lock(&mu_);
    acked_.insert(ack_key);
    ++acknowledged_;
  }
  absl::MutexLock lock(&mu_);
  absl::erase_if(cache_, [&](const auto& entry) { return !listed.contains(entry.first); });
  return first;
}

size_t BasisStore::cached() const {
  absl::MutexLock lock(&mu_);
  return cache_.size();
}

uint64_t BasisStore::acknowledged() const {
  absl::MutexLock lock(&mu_);
  return acknowledged_;
}

}  // namespace gift::worker
