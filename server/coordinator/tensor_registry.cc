#include "server/coordinator/tensor_registry.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/tensor_shape.h"

namespace gift::coordinator {
void TensorRegistry::Reset(std::vector<gift::v1::TensorInfo> tensors) {
  tensors_.clear();
  tensor_ids_.clear();
  for (gift::v1::TensorInfo& t : tensors) {
    tensor_ids_[t.name()] = t.tensor_id();
    const uint64_t id = t.tensor_id();
    tensors_[id] = std::move(t);
  }
  ClearChanges();
}

const gift::v1::TensorInfo* TensorRegistry::FindByName(absl::string_view name) const {
  auto it = tensor_ids_.find(name);
  return it != tensor_ids_.end() ? &tensors_.at(it->second) : nullptr;
}

absl::StatusOr<std::vector<const gift::v1::TensorSpec*>> TensorRegistry::Check(
    const gift::v1::RegisterTensorsRequest& request) const {
  std::map<std::string, const gift::v1::TensorSpec*> seen;
  for (int i = 0; i < request.tensors_size(); ++i) {
    const gift::v1::TensorSpec& spec = request.tensors(i);
    if (spec.name().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("tensors[", i, "].name is empty"));
    }
    if (spec.shape().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", spec.name(), "' has no shape"));
    }
    if (absl::StatusOr<uint64_t> elements = TensorElements(spec.shape()); !elements.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", spec.name(), "': ", elements.status().message()));
    }
    if (spec.dtype() == gift::v1::DTYPE_UNSPECIFIED || !gift::v1::DType_IsValid(spec.dtype())) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", spec.name(), "' dtype ", spec.dtype(), " is not valid"));
    }
    auto conflicts = [&](const google::protobuf::RepeatedField<int64_t>& shape,
                         gift::v1::DType dtype) {
      return !std::equal(shape.begin(), shape.end(), spec.shape().begin(), spec.shape().end()) ||
             dtype != spec.dtype();
    };
    auto known = tensor_ids_.find(spec.name());
    if (known != tensor_ids_.end()) {
      const gift::v1::TensorInfo& t = tensors_.at(known->second);
      if (conflicts(t.shape(), t.dtype())) {
        return absl::AlreadyExistsError(absl::StrCat(
            "tensor '", spec.name(), "' is registered with shape ", ShapeString(t.shape()),
            " dtype ", gift::v1::DType_Name(t.dtype()), ", not shape ", ShapeString(spec.shape()),
            " dtype ", gift::v1::DType_Name(spec.dtype()),
            " (a model of other shapes is a new run: register with a new run id, or after "
            "`giftctl run reset`)"));
      }
    }
    auto [it, inserted] = seen.emplace(spec.name(), &spec);
    if (!inserted && conflicts(it->second->shape(), it->second->dtype())) {
      return absl::AlreadyExistsError(
          absl::StrCat("tensor '", spec.name(), "' appears twice with different shapes"));
    }
  }
  std::vector<const gift::v1::TensorSpec*> fresh;
  for (const auto& [name, spec] : seen) {
    if (tensor_ids_.count(name) == 0) fresh.push_back(spec);
  }
  return fresh;
}

const gift::v1::TensorInfo& TensorRegistry::Add(const gift::v1::TensorSpec& spec,
                                                uint64_t tensor_id) {
  gift::v1::TensorInfo t;
  t.set_tensor_id(tensor_id);
  t.set_name(spec.name());
  *t.mutable_shape() = spec.shape();
  t.set_dtype(spec.dtype());
  uint64_t elements = 1;
  for (int64_t d : spec.shape()) elements *= static_cast<uint64_t>(d);
  t.set_num_elements(elements);
  put_tensors_.insert(tensor_id);
  tensor_ids_.emplace(t.name(), tensor_id);
  return tensors_[tensor_id] = std::move(t);
}

std::vector<policy::NamedShape> TensorRegistry::Shapes(
    const std::vector<const gift::v1::TensorSpec*>& extra) const {
  std::vector<policy::NamedShape> shapes;
  for (const auto& [tid, t] : tensors_) shapes.push_back({t.name(), t.shape()});
  for (const gift::v1::TensorSpec* spec : extra) shapes.push_back({spec->name(), spec->shape()});
  return shapes;
}

std::vector<std::string> TensorRegistry::DropAll() {
  std::vector<std::string> names;
  for (const auto& [id, t] : tensors_) names.push_back(t.name());
  tensors_.clear();
  tensor_ids_.clear();
  put_tensors_.clear();
  dropped_all_ = true;
  return names;
}

void TensorRegistry::AddChangesTo(StoreMutation* mutation) const {
  if (dropped_all_) mutation->drop_all_tensors = true;
  for (uint64_t id : put_tensors_) {
    auto it = tensors_.find(id);
    if (it != tensors_.end()) mutation->put_tensors.push_back(it->second);
  }
}

}  // namespace gift::coordinator
