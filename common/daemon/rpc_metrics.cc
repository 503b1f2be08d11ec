#include "common/daemon/rpc_metrics.h"

#include <google/protobuf/descriptor.h>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"

namespace gift::daemon {
namespace {

class CountingInterceptor : public grpc::experimental::Interceptor {
 public:
  CountingInterceptor(prometheus::Family<prometheus::Counter>* family, std::string method)
      : family_(family), method_(std::move(method)) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status status = methods->GetSendStatus();
      family_->Add({{"method", method_}, {"code", std::string(GrpcCodeName(status.error_code()))}})
          .Increment();
    }
    methods->Proceed();
  }

 private:
  prometheus::Family<prometheus::Counter>* const family_;
  const std::string method_;
};

class CountingFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  CountingFactory(prometheus::Family<prometheus::Counter>* family,
                  absl::flat_hash_set<std::string> methods)
      : family_(family), methods_(std::move(methods)) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    std::string method = "other";
    const char* path = info->method();
    if (path != nullptr && methods_.contains(path)) {
      absl::string_view p(path);
      method = std::string(p.substr(p.rfind('/') + 1));
    }
    return new CountingInterceptor(family_, std::move(method));
  }

 private:
  prometheus::Family<prometheus::Counter>* const family_;
  const absl::flat_hash_set<std::string> methods_;  // "/pkg.Service/Method"
};

}  // namespace

absl::string_view GrpcCodeName(int code) {
  static constexpr absl::string_view kNames[] = {"OK",
                                                 "CANCELLED",
                                                 "UNKNOWN",
                                                 "INVALID_ARGUMENT",
                                                 "DEADLINE_EXCEEDED",
                                                 "NOT_FOUND",
                                                 "ALREADY_EXISTS",
                                                 "PERMISSION_DENIED",
                                                 "RESOURCE_EXHAUSTED",
                                                 "FAILED_PRECONDITION",
                                                 "ABORTED",
                                                 "OUT_OF_RANGE",
                                                 "UNIMPLEMENTED",
                                                 "INTERNAL",
                                                 "UNAVAILABLE",
                                                 "DATA_LOSS",
                                                 "UNAUTHENTICATED"};
  if (code < 0 || code >= static_cast<int>(std::size(kNames))) return "UNKNOWN";
  return kNames[code];
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> MakeRpcCounterInterceptor(
    prometheus::Registry& registry, absl::string_view metric_name,
    const std::vector<std::string>& services) {
  absl::flat_hash_set<std::string> methods;
  const google::protobuf::DescriptorPool* pool = google::protobuf::DescriptorPool::generated_pool();
  for (const std::string& name : services) {
    const google::protobuf::ServiceDescriptor* service = pool->FindServiceByName(name);
    if (service == nullptr) continue;
    for (int i = 0; i < service->method_count(); ++i) {
      methods.insert(absl::StrCat("/", name, "/", service->method(i)->name()));
    }
  }
  auto& family = prometheus::BuildCounter()
                     .Name(std::string(metric_name))
                     .Help("Finished RPCs by method and gRPC status code")
                     .Register(registry);
  // Every method's OK series exists from the start (at 0), so the page lists
  // the family before the first call and a rate() over it reads 0, not "no
  // data".
  for (const std::string& path : methods) {
    family.Add({{"method", path.substr(path.rfind('/') + 1)}, {"code", "OK"}});
  }
  return std::make_unique<CountingFactory>(&family, std::move(methods));
}

}  // namespace gift::daemon
