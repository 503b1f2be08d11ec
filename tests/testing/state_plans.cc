#include "tests/testing/state_plans.h"

#include <random>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gift::test {

std::vector<gift::v1::TensorSpec> Float32Specs(const std::vector<std::vector<int64_t>>& shapes) {
  std::vector<gift::v1::TensorSpec> specs(shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) {
    specs[i].set_name(absl::StrCat("layer", i, ".weight"));
    for (int64_t d : shapes[i]) specs[i].add_shape(d);
    specs[i].set_dtype(gift::v1::DTYPE_FLOAT32);
  }
  return specs;
}

std::function<bool(const gift::v1::ClusterState&)> ClusterReady(int workers, int servers,
                                                                int tensors) {
  return [=](const gift::v1::ClusterState& s) {
    return s.workers_size() == workers && s.servers_size() == servers &&
           s.tensors_size() == tensors && s.shard_map().chunks_size() > 0 &&
           s.shard_map().epoch() == s.epoch();
  };
}

std::vector<std::string> ServerAddresses(const gift::v1::ClusterState& state) {
  std::vector<std::string> servers(state.servers_size());
  for (const auto& m : state.servers()) {
    if (m.rank() < servers.size()) servers[m.rank()] = m.data_address();
  }
  return servers;
}

worker::StepPlan PlanFromState(const gift::v1::ClusterState& state, uint64_t step, uint32_t rank,
                               uint32_t world, const codec::CodecSpec& push,
                               std::vector<std::vector<float>>* buffers) {
  const std::vector<std::string> servers = ServerAddresses(state);
  buffers->clear();
  buffers->reserve(state.tensors_size());
  worker::StepPlan plan{.epoch = state.epoch(), .step = step, .rank = rank, .world_size = world};
  for (const auto& t : state.tensors()) {
    std::mt19937 rng(uint32_t(step * 100 + t.tensor_id() * 10 + rank));
    std::normal_distribution<float> normal;
    std::vector<float> g(t.num_elements());
    for (float& x : g) x = normal(rng);
    buffers->push_back(std::move(g));
    const uint64_t cols = t.shape(t.shape_size() - 1);
    worker::TensorStep ts{.tensor_id = t.tensor_id(),
                          .rows = t.num_elements() / cols,
                          .cols = cols,
                          .data = buffers->back().data(),
                          .push_spec = push};
    for (const auto& c : state.shard_map().chunks()) {
      if (c.tensor_id() != t.tensor_id()) continue;
      const std::string server = c.server_rank() < servers.size() ? servers[c.server_rank()] : "";
      ts.chunks.push_back({.index = c.index(),
                           .offset = c.offset(),
                           .num_elements = c.num_elements(),
                           .server = server});
    }
    plan.tensors.push_back(std::move(ts));
  }
  return plan;
}

std::vector<absl::StatusOr<worker::StepReport>> RunPlans(
    const std::vector<std::unique_ptr<worker::PushPullEngine>>& engines,
    const std::vector<worker::StepPlan>& plans) {
  std::vector<absl::StatusOr<worker::StepReport>> reports(engines.size(),
                                                          absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (size_t w = 0; w < engines.size() && w < plans.size(); ++w) {
    threads.emplace_back([&, w] { reports[w] = engines[w]->Run(plans[w]); });
  }
  for (auto& t : threads) t.join();
  return reports;
}

}  // namespace gift::test
