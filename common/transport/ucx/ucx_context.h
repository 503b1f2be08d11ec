// The UCP context of a UCX transport (ucx_transport.h): created from the
// transport's options (UCX_TLS and rendezvous threshold applied to UCX's
// configuration, which the environment may override as UCX documents), and
// what memory it can carry.
//
// Memory types: UCX carries CUDA device memory only when it was built with
// its CUDA module (ucx/libuct_cuda.so) and finds a device; Debian's UCX
// ships no CUDA module, so there every device tensor is staged through host
// memory (worker/cuda/device_codec_stage.h). ucp_context_query's
// memory_types says which is the case at run time.
//
// Internal to gift_transport_ucx. Thread safety: the functions are pure but
// for UCX's own calls, which are safe on a context no other thread uses yet.
#ifndef GIFT_COMMON_TRANSPORT_UCX_UCX_CONTEXT_H_
#define GIFT_COMMON_TRANSPORT_UCX_UCX_CONTEXT_H_

#include <ucp/api/ucp.h>

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/transport/ucx/ucx_transport.h"

namespace gift::transport {

// Whether this host has a soft-RoCE device (rdma_rxe): an RDMA device under
// `sysfs_class` with a `parent` attribute (the Ethernet device it runs on),
// which hardware RDMA devices do not have.
bool HasSoftRoceDevice(const std::string& sysfs_class = "/sys/class/infiniband");

// Whether UCX may use its tcp transport for `options` (UCX_TLS when the
// option is empty): no list, an exclusion list ("^ib"), "all" or one naming
// tcp. `getenv` reads the environment.
bool MayUseTcp(const UcxTransportOptions& options,
               const std::function<const char*(const char*)>& getenv);

// Internal with UCX's message for `what`.
absl::Status UcxError(absl::string_view what, ucs_status_t status);

// A UCP context with active messages and wakeup, configured from `options`
// (see UcxTransportOptions). The caller owns it (ucp_cleanup). Internal
// with UCX's message when UCX cannot be initialized or rejects an option.
//
// On a host with a soft-RoCE device, UCX's UD transports keep every packet
// that reaches their queue pair (ETH_DGID_CHECK off, unless
// UCX_UD_VERBS_ETH_DGID_CHECK is set): UCX 1.13's check of the destination
// GID in the received GRH drops every packet rdma_rxe delivers, so UD and
// the RC connections UD wires up time out (docs/vm.md, RDMA).
absl::StatusOr<ucp_context_h> CreateUcpContext(const UcxTransportOptions& options);

// The bit mask of ucs_memory_type_t (UCS_BIT(UCS_MEMORY_TYPE_HOST), ...)
// that `context` can send from and receive into. Internal when UCX cannot
// answer (then treat it as host only).
absl::StatusOr<uint64_t> QueryMemoryTypes(ucp_context_h context);

// "host", "host,cuda", ...: the names of the types in `mask` (UCX's names,
// lower case), for logs; "none" for an empty mask.
std::string DescribeMemoryTypes(uint64_t mask);

// Whether `mask` includes CUDA device memory.
inline bool HasCudaMemory(uint64_t mask) { return (mask & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0; }

}  // namespace gift::transport

#endif  // GIFT_COMMON_TRANSPORT_UCX_UCX_CONTEXT_H_
