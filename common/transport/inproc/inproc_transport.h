// The in-process implementation of Transport (transport.h), for unit tests of
// the logic above the transport: transports created on one InprocHub reach
// each other by address ("inproc:N"). Send copies the payload at once (so
// its callback runs soon after, on the sender's progress thread); messages
// are delivered on the receiver's progress thread in order per sender.
// Destroying a transport reports a peer failure to every transport that
// connected to it, as a dead process would.
//
// Ownership: the hub must outlive every transport created on it.
// Thread safety: InprocHub and the transports are thread-safe.
#ifndef GIFT_COMMON_TRANSPORT_INPROC_INPROC_TRANSPORT_H_
#define GIFT_COMMON_TRANSPORT_INPROC_INPROC_TRANSPORT_H_

#include <cstdint>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/transport/transport.h"

namespace gift::transport {

class InprocTransport;

class InprocHub {
 public:
  InprocHub() = default;
  InprocHub(const InprocHub&) = delete;
  InprocHub& operator=(const InprocHub&) = delete;

 private:
  friend class InprocTransport;
  absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, InprocTransport*> transports_ ABSL_GUARDED_BY(mu_);
};

// InvalidArgument without an on_receive handler.
absl::StatusOr<std::unique_ptr<Transport>> CreateInprocTransport(InprocHub* hub,
                                                                 TransportHandlers handlers);

}  // namespace gift::transport

#endif  // GIFT_COMMON_TRANSPORT_INPROC_INPROC_TRANSPORT_H_
