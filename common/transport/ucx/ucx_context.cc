#include "common/transport/ucx/ucx_context.h"

#include <ucs/memory/memory_type.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace gift::transport {

absl::Status UcxError(absl::string_view what, ucs_status_t status) {
  return absl::InternalError(absl::StrCat(what, ": ", ucs_status_string(status)));
}

namespace {

// The transports UCX is asked for: the option, else UCX_TLS, else "".
std::string RequestedTls(const UcxTransportOptions& options,
                         const std::function<const char*(const char*)>& getenv) {
  if (!options.tls.empty()) return options.tls;
  const char* env = getenv("UCX_TLS");
  return env != nullptr ? env : "";
}

}  // namespace

std::string EffectiveRndvThresh(const UcxTransportOptions& options,
                                const std::function<const char*(const char*)>& getenv) {
  if (getenv("UCX_RNDV_THRESH") != nullptr) return "";  // UCX reads it itself
  if (!options.rndv_thresh.empty()) return options.rndv_thresh;
  // TCP the only network transport: every name is tcp or an intra-host one.
  bool tcp = false;
  for (absl::string_view name : absl::StrSplit(RequestedTls(options, getenv), ',')) {
    if (name == "tcp") {
      tcp = true;
    } else if (name != "self" && name != "sm" && name != "shm" && name != "posix" &&
               name != "sysv" && name != "cma" && name != "knem" && name != "xpmem") {
      return "";  // RDMA, an alias such as "all", or an exclusion ("^ib"): UCX's choice
    }
  }
  return tcp ? "inf" : "";
}

bool MayUseTcp(const UcxTransportOptions& options,
               const std::function<const char*(const char*)>& getenv) {
  const std::string tls = RequestedTls(options, getenv);
  if (tls.empty() || tls[0] == '^') return true;  // UCX's choice, or all but some
  for (absl::string_view name : absl::StrSplit(tls, ',')) {
    if (name == "tcp" || name == "all") return true;
  }
  return false;
}

bool HasSoftRoceDevice(const std::string& sysfs_class) {
  std::error_code error;
  for (const auto& device : std::filesystem::directory_iterator(sysfs_class, error)) {
    if (std::filesystem::exists(device.path() / "parent", error)) return true;
  }
  return false;
}

absl::StatusOr<ucp_context_h> CreateUcpContext(const UcxTransportOptions& options) {
  ucp_config_t* config = nullptr;
  ucs_status_t status = ucp_config_read(nullptr, nullptr, &config);
  if (status != UCS_OK) return UcxError("ucp_config_read", status);
  auto getenv = [](const char* name) -> const char* { return std::getenv(name); };
  if (!options.tls.empty()) {
    status = ucp_config_modify(config, "TLS", options.tls.c_str());
    if (status != UCS_OK) {
      ucp_config_release(config);
      return UcxError(absl::StrCat("UCX transports '", options.tls, "'"), status);
    }
  }
  if (const std::string rndv = EffectiveRndvThresh(options, getenv); !rndv.empty()) {
    status = ucp_config_modify(config, "RNDV_THRESH", rndv.c_str());
    if (status != UCS_OK) {
      ucp_config_release(config);
      return UcxError(absl::StrCat("UCX rendezvous threshold '", rndv, "'"), status);
    }
  }
  // Non-blocking TCP connects (unless UCX_TCP_CONN_NB says otherwise). UCX
  // 1.13.1's blocking connect leaks its socket when the connect is refused
  // at once, as it is for an address on this host where nothing listens
  // any more (a killed server's, dialed again after its failure):
  // uct_tcp_ep_create returns the error without destroying the endpoint it
  // made. A non-blocking connect fails later, through the endpoint's error
  // path, which closes it (UcxTransportTest.RefusedConnectsLeaveNoDescriptors).
  // Only where tcp may be used: UCX warns of an "invalid configuration"
  // for a key no opened transport took.
  if (getenv("UCX_TCP_CONN_NB") == nullptr && MayUseTcp(options, getenv)) {
    status = ucp_config_modify(config, "CONN_NB", "y");  // the tcp iface's
    if (status != UCS_OK) {
      ucp_config_release(config);
      return UcxError("UCX TCP_CONN_NB", status);
    }
  }
  // Soft-RoCE: UD's destination-GID check drops what rdma_rxe delivers
  // (see the header). The key as UCX matches it in the UD transports' own
  // table (its "UD_" part): neither "ETH_DGID_CHECK" nor the variable's
  // "UD_VERBS_ETH_DGID_CHECK" reaches it (UCX warns "invalid configuration").
  if (getenv("UCX_UD_VERBS_ETH_DGID_CHECK") == nullptr && HasSoftRoceDevice()) {
    status = ucp_config_modify(config, "UD_ETH_DGID_CHECK", "n");
    if (status != UCS_OK) {
      ucp_config_release(config);
      return UcxError("UCX ETH_DGID_CHECK", status);
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  ucp_context_h context = nullptr;
  status = ucp_init(&params, config, &context);
  ucp_config_release(config);
  if (status != UCS_OK) return UcxError("ucp_init", status);
  return context;
}

absl::StatusOr<uint64_t> QueryMemoryTypes(ucp_context_h context) {
  ucp_context_attr_t attr{};
  attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  if (const ucs_status_t status = ucp_context_query(context, &attr); status != UCS_OK) {
    return UcxError("ucp_context_query", status);
  }
  return attr.memory_types;
}

std::string DescribeMemoryTypes(uint64_t mask) {
  std::string names;
  for (int t = UCS_MEMORY_TYPE_HOST; t < UCS_MEMORY_TYPE_LAST; ++t) {
    if ((mask & UCS_BIT(t)) == 0) continue;
    absl::StrAppend(&names, names.empty() ? "" : ",", ucs_memory_type_names[t]);
  }
  return names.empty() ? "none" : names;
}

}  // namespace gift::transport
