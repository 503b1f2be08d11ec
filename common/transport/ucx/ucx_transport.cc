#include "common/transport/ucx/ucx_transport.h"

#include <ucp/api/ucp.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/base/crc32c.h"
#include "common/transport/ucx/ucx_context.h"

namespace gift::transport {
namespace {

// The active-message id of every data-plane message.
constexpr unsigned kAmId = 17;

// Address envelope: magic, u32 length, u32 CRC-32C of the UCX bytes, bytes.
constexpr char kMagic[8] = {'G', 'I', 'F', 'T', 'U', 'C', 'X', '1'};
constexpr size_t kEnvelopeHeader = sizeof(kMagic) + 8;
constexpr size_t kMaxUcxAddressBytes = 1 << 20;

void PutU32(uint32_t v, char* out) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

uint32_t GetU32(const char* in) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(in[i])) << (8 * i);
  return v;
}


// A send in flight: keeps the header alive (UCX 1.13 reads it until
// completion) and the caller's callback.
struct SendState {
  std::vector<uint8_t> header;
  SendCallback done;
};

// A rendezvous receive in flight.
struct RecvState {
  Message message;
  class UcxTransport* transport;
};

class UcxTransport final : public Transport {
 public:
  static absl::StatusOr<std::unique_ptr<Transport>> Create(TransportHandlers handlers,
                                                           const UcxTransportOptions& options);
  ~UcxTransport() override;

  std::string address() const override { return address_; }
  absl::StatusOr<PeerId> Connect(absl::string_view address) override;
  absl::Status Send(PeerId peer, absl::Span<const uint8_t> header,
                    absl::Span<const uint8_t> payload, SendCallback done) override;
  void Disconnect(PeerId peer) override;
  absl::StatusOr<std::unique_ptr<MemoryRegion>> RegisterMemory(absl::Span<uint8_t> buffer) override;
  std::string name() const override {
    return absl::StrCat("ucx (memory types: ", DescribeMemoryTypes(memory_types_), ")");
  }
  bool carries_cuda_memory() const override { return HasCudaMemory(memory_types_); }
  ReceiveCounts receive_counts() const override {
    return {.eager = eager_receives_.load(std::memory_order_relaxed),
            .rendezvous = rendezvous_receives_.load(std::memory_order_relaxed)};
  }

  void Deliver(Message message) { handlers_.on_receive(std::move(message)); }

  // Any thread: unregisters a region (MemoryRegion's destructor).
  void Unregister(uintptr_t start);

 private:
  class UcxRegion;
  struct Registered {
    size_t size = 0;
    ucp_mem_h memh = nullptr;
  };
  struct Peer {
    ucp_ep_h ep = nullptr;
    // Created by Connect: has an error handler, and is closed by us. Peers
    // met as reply endpoints belong to UCX and are only forgotten.
    bool ours = false;
  };
  struct PendingRndv {
    void* desc;
    Message message;
  };

  explicit UcxTransport(TransportHandlers handlers) : handlers_(std::move(handlers)) {}
  absl::Status Init(const UcxTransportOptions& options);

  // Runs `command` on the progress thread.
  void Post(std::function<void()> command);
  void Loop();
  bool HasCommands();

  // Progress-thread only.
  PeerId PeerForReplyEp(ucp_ep_h ep);
  // Forgets the peer and closes its endpoint (ours only), which completes
  // its pending sends with an error; calls on_peer_failure when `notify`.
  void DropPeer(PeerId id, const absl::Status& reason, bool notify);
  void CloseEp(ucp_ep_h ep);
  void StartRendezvousReceives();
  void SendNow(PeerId peer, std::unique_ptr<SendState> state, const uint8_t* payload,
               size_t payload_size);
  // The registration holding [data, data + size), if any.
  ucp_mem_h MemhFor(const void* data, size_t size);
  // Where the payload of a message lands: the placer's buffer, else
  // message.payload sized to `length`.
  void Place(Message& message, size_t length);
  // Runs `command` on the progress thread and waits for it; on the progress
  // thread itself (a callback), runs it at once.
  void RunOnProgressThread(const std::function<void()>& command);

  static ucs_status_t OnAm(void* arg, const void* header, size_t header_length, void* data,
                           size_t length, const ucp_am_recv_param_t* param);
  static void OnEpError(void* arg, ucp_ep_h ep, ucs_status_t status);
  static void OnSendDone(void* request, ucs_status_t status, void* user_data);
  static void OnRecvDone(void* request, ucs_status_t status, size_t length, void* user_data);

  TransportHandlers handlers_;
  ucp_context_h context_ = nullptr;
  uint64_t memory_types_ = 0;  // ucs_memory_type_t bits the context carries
  ucp_worker_h worker_ = nullptr;
  std::string address_;
  std::thread thread_;
  // The progress thread's id, set when it starts (read by other threads).
  std::atomic<std::thread::id> progress_thread_{};

  absl::Mutex mu_;
  std::deque<std::function<void()>> commands_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // Peers that Send may target (not failed, not disconnected).
  absl::flat_hash_set<PeerId> live_ ABSL_GUARDED_BY(mu_);
  std::atomic<PeerId> next_peer_{1};
  std::atomic<uint64_t> eager_receives_{0};
  std::atomic<uint64_t> rendezvous_receives_{0};
  // Registered buffers by start address.
  absl::Mutex regions_mu_;
  std::map<uintptr_t, Registered> regions_ ABSL_GUARDED_BY(regions_mu_);

  // Progress-thread state.
  absl::flat_hash_map<PeerId, Peer> peers_;
  absl::flat_hash_map<ucp_ep_h, PeerId> by_ep_;
  std::vector<PendingRndv> pending_rndv_;
  std::vector<ucp_ep_h> eps_to_close_;
};

absl::StatusOr<std::unique_ptr<Transport>> UcxTransport::Create(
    TransportHandlers handlers, const UcxTransportOptions& options) {
  if (!handlers.on_receive) return absl::InvalidArgumentError("on_receive handler is required");
  std::unique_ptr<UcxTransport> t(new UcxTransport(std::move(handlers)));
  if (auto s = t->Init(options); !s.ok()) return s;
  t->thread_ = std::thread([p = t.get()] { p->Loop(); });
  return std::unique_ptr<Transport>(std::move(t));
}

absl::Status UcxTransport::Init(const UcxTransportOptions& options) {
  absl::StatusOr<ucp_context_h> context = CreateUcpContext(options);
  if (!context.ok()) return context.status();
  context_ = *context;
  // Host only when UCX cannot say (nothing is lost: device data is staged).
  memory_types_ = QueryMemoryTypes(context_).value_or(UCS_BIT(UCS_MEMORY_TYPE_HOST));
  ucs_status_t status;

  ucp_worker_params_t wparams{};
  wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  // Only the progress thread drives the worker (ucp_worker_signal, the one
  // call made from other threads, is thread-safe in every mode).
  wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
  status = ucp_worker_create(context_, &wparams, &worker_);
  if (status != UCS_OK) return UcxError("ucp_worker_create", status);

  ucp_am_handler_param_t hparams{};
  hparams.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                       UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
  hparams.id = kAmId;
  hparams.cb = &UcxTransport::OnAm;
  hparams.arg = this;
  hparams.flags = UCP_AM_FLAG_WHOLE_MSG;
  status = ucp_worker_set_am_recv_handler(worker_, &hparams);
  if (status != UCS_OK) return UcxError("ucp_worker_set_am_recv_handler", status);

  ucp_address_t* addr = nullptr;
  size_t addr_len = 0;
  status = ucp_worker_get_address(worker_, &addr, &addr_len);
  if (status != UCS_OK) return UcxError("ucp_worker_get_address", status);
  address_.resize(kEnvelopeHeader + addr_len);
  std::memcpy(address_.data(), kMagic, sizeof(kMagic));
  PutU32(static_cast<uint32_t>(addr_len), address_.data() + sizeof(kMagic));
  PutU32(crc32c::Value(addr, addr_len), address_.data() + sizeof(kMagic) + 4);
  std::memcpy(address_.data() + kEnvelopeHeader, addr, addr_len);
  ucp_worker_release_address(worker_, addr);
  return absl::OkStatus();
}

UcxTransport::~UcxTransport() {
  if (thread_.joinable()) {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    ucp_worker_signal(worker_);
    thread_.join();
  }
  if (worker_ != nullptr) ucp_worker_destroy(worker_);
  if (context_ != nullptr) ucp_cleanup(context_);
}

void UcxTransport::Post(std::function<void()> command) {
  {
    absl::MutexLock lock(&mu_);
    commands_.push_back(std::move(command));
  }
  ucp_worker_signal(worker_);
}

bool UcxTransport::HasCommands() {
  absl::MutexLock lock(&mu_);
  return !commands_.empty() || stop_;
}

void UcxTransport::Loop() {
  progress_thread_.store(std::this_thread::get_id());
  for (;;) {
    std::deque<std::function<void()>> commands;
    bool stop;
    {
      absl::MutexLock lock(&mu_);
      commands.swap(commands_);
      stop = stop_;
    }
    for (auto& command : commands) command();
    if (stop) break;
    while (ucp_worker_progress(worker_) != 0) {
    }
    StartRendezvousReceives();
    for (ucp_ep_h ep : std::exchange(eps_to_close_, {})) CloseEp(ep);
    if (HasCommands() || !pending_rndv_.empty()) continue;
    const ucs_status_t armed = ucp_worker_arm(worker_);
    if (armed == UCS_ERR_BUSY) continue;  // events arrived meanwhile
    // A command posted after the check above signals the worker, which
    // wakes the wait below.
    if (HasCommands()) continue;
    ucp_worker_wait(worker_);
  }
  // Shutdown: fail every peer's pending sends and close the endpoints.
  std::vector<PeerId> ids;
  for (const auto& [id, peer] : peers_) ids.push_back(id);
  for (PeerId id : ids) DropPeer(id, absl::CancelledError("transport shut down"), false);
  for (ucp_ep_h ep : std::exchange(eps_to_close_, {})) CloseEp(ep);
  for (auto& pending : pending_rndv_) ucp_am_data_release(worker_, pending.desc);
  pending_rndv_.clear();
}

absl::StatusOr<PeerId> UcxTransport::Connect(absl::string_view address) {
  if (address.size() < kEnvelopeHeader ||
      std::memcmp(address.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::InvalidArgumentError("not a GIFT UCX address (bad magic or too short)");
  }
  const uint32_t len = GetU32(address.data() + sizeof(kMagic));
  if (len == 0 || len > kMaxUcxAddressBytes || address.size() != kEnvelopeHeader + len) {
    return absl::InvalidArgumentError(absl::StrCat("UCX address length field ", len,
                                                   " does not match its ",
                                                   address.size() - kEnvelopeHeader, " bytes"));
  }
  const char* ucx_bytes = address.data() + kEnvelopeHeader;
  if (crc32c::Value(ucx_bytes, len) != GetU32(address.data() + sizeof(kMagic) + 4)) {
    return absl::InvalidArgumentError("UCX address checksum mismatch (corrupt address)");
  }
  std::string copy(ucx_bytes, len);
  absl::StatusOr<PeerId> result;
  absl::Notification done;
  Post([&] {
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.address = reinterpret_cast<const ucp_address_t*>(copy.data());
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = &UcxTransport::OnEpError;
    params.err_handler.arg = this;
    ucp_ep_h ep = nullptr;
    const ucs_status_t status = ucp_ep_create(worker_, &params, &ep);
    if (status != UCS_OK) {
      result = absl::UnavailableError(
          absl::StrCat("cannot connect to the peer: ", ucs_status_string(status)));
    } else {
      const PeerId id = next_peer_.fetch_add(1);
      Peer& peer = peers_[id];
      peer.ep = ep;
      peer.ours = true;
      by_ep_[ep] = id;
      {
        absl::MutexLock lock(&mu_);
        live_.insert(id);
      }
      result = id;
    }
    done.Notify();
  });
  done.WaitForNotification();
  return result;
}

absl::Status UcxTransport::Send(PeerId peer, absl::Span<const uint8_t> header,
                                absl::Span<const uint8_t> payload, SendCallback done) {
  if (header.size() > kMaxHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("header of ", header.size(), " bytes exceeds ", kMaxHeaderBytes));
  }
  {
    absl::MutexLock lock(&mu_);
    if (stop_) return absl::UnavailableError("transport is shutting down");
    if (!live_.contains(peer)) {
      return absl::NotFoundError(absl::StrCat("peer ", peer, " is not connected"));
    }
  }
  auto state = std::make_unique<SendState>();
  state->header.assign(header.begin(), header.end());
  state->done = std::move(done);
  Post([this, peer, s = state.release(), data = payload.data(), size = payload.size()] {
    SendNow(peer, std::unique_ptr<SendState>(s), data, size);
  });
  return absl::OkStatus();
}

void UcxTransport::SendNow(PeerId id, std::unique_ptr<SendState> state, const uint8_t* payload,
                           size_t payload_size) {
  auto it = peers_.find(id);
  if (it == peers_.end()) {
    state->done(absl::UnavailableError(absl::StrCat("peer ", id, " failed or was disconnected")));
    return;
  }
  ucp_request_param_t param{};
  param.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_AM_SEND_FLAG_REPLY;
  param.cb.send = &UcxTransport::OnSendDone;
  param.user_data = state.get();
  if (ucp_mem_h memh = MemhFor(payload, payload_size); memh != nullptr) {
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
    param.memh = memh;
  }
  const ucs_status_ptr_t request =
      ucp_am_send_nbx(it->second.ep, kAmId, state->header.data(), state->header.size(), payload,
                      payload_size, &param);
  if (request == nullptr) {
    state->done(absl::OkStatus());
  } else if (UCS_PTR_IS_ERR(request)) {
    state->done(UcxError("ucp_am_send_nbx", UCS_PTR_STATUS(request)));
  } else {
    state.release();  // owned by OnSendDone now
  }
}

void UcxTransport::OnSendDone(void* request, ucs_status_t status, void* user_data) {
  std::unique_ptr<SendState> state(static_cast<SendState*>(user_data));
  state->done(status == UCS_OK ? absl::OkStatus() : UcxError("send", status));
  ucp_request_free(request);
}

void UcxTransport::Disconnect(PeerId peer) {
  {
    absl::MutexLock lock(&mu_);
    if (!live_.erase(peer)) return;
  }
  Post([this, peer] { DropPeer(peer, absl::CancelledError("disconnected"), false); });
}

PeerId UcxTransport::PeerForReplyEp(ucp_ep_h ep) {
  if (auto it = by_ep_.find(ep); it != by_ep_.end()) return it->second;
  const PeerId id = next_peer_.fetch_add(1);
  peers_[id].ep = ep;
  by_ep_[ep] = id;
  absl::MutexLock lock(&mu_);
  live_.insert(id);
  return id;
}

void UcxTransport::DropPeer(PeerId id, const absl::Status& reason, bool notify) {
  auto it = peers_.find(id);
  if (it == peers_.end()) return;
  {
    absl::MutexLock lock(&mu_);
    live_.erase(id);
  }
  const bool ours = it->second.ours;
  by_ep_.erase(it->second.ep);
  // Closed after the current progress call returns (not from inside a UCX
  // callback).
  if (ours) eps_to_close_.push_back(it->second.ep);
  peers_.erase(it);
  if (notify && ours && handlers_.on_peer_failure) handlers_.on_peer_failure(id, reason);
}

void UcxTransport::CloseEp(ucp_ep_h ep) {
  // FORCE: pending sends complete with an error instead of waiting for a
  // peer that may be gone.
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_EP_CLOSE_FLAG_FORCE;
  const ucs_status_ptr_t request = ucp_ep_close_nbx(ep, &param);
  if (request == nullptr || UCS_PTR_IS_ERR(request)) return;
  // A forced close completes after a little progress.
  for (int i = 0; i < 100000 && ucp_request_check_status(request) == UCS_INPROGRESS; ++i) {
    ucp_worker_progress(worker_);
  }
  ucp_request_free(request);
}

void UcxTransport::OnEpError(void* arg, ucp_ep_h ep, ucs_status_t status) {
  auto* self = static_cast<UcxTransport*>(arg);
  auto it = self->by_ep_.find(ep);
  if (it == self->by_ep_.end()) return;
  self->DropPeer(it->second,
                 absl::UnavailableError(absl::StrCat("peer failed: ", ucs_status_string(status))),
                 /*notify=*/true);
}

ucs_status_t UcxTransport::OnAm(void* arg, const void* header, size_t header_length, void* data,
                                size_t length, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxTransport*>(arg);
  Message message;
  if (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) {
    message.from = self->PeerForReplyEp(param->reply_ep);
  }
  const auto* h = static_cast<const uint8_t*>(header);
  message.header.assign(h, h + header_length);
  self->Place(message, length);
  if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
    // The payload is still at the sender: fetch it (straight into its
    // destination) after this callback.
    self->rendezvous_receives_.fetch_add(1, std::memory_order_relaxed);
    self->pending_rndv_.push_back({data, std::move(message)});
    return UCS_INPROGRESS;
  }
  self->eager_receives_.fetch_add(1, std::memory_order_relaxed);
  if (length > 0) std::memcpy(const_cast<uint8_t*>(message.bytes().data()), data, length);
  self->Deliver(std::move(message));
  return UCS_OK;
}

void UcxTransport::StartRendezvousReceives() {
  for (auto& pending : std::exchange(pending_rndv_, {})) {
    auto state = std::make_unique<RecvState>();
    state->message = std::move(pending.message);
    state->transport = this;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.recv_am = &UcxTransport::OnRecvDone;
    param.user_data = state.get();
    absl::Span<const uint8_t> dest = state->message.bytes();
    if (ucp_mem_h memh = MemhFor(dest.data(), dest.size()); memh != nullptr) {
      param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
      param.memh = memh;
    }
    const ucs_status_ptr_t request = ucp_am_recv_data_nbx(
        worker_, pending.desc, const_cast<uint8_t*>(dest.data()), dest.size(), &param);
    if (request == nullptr) {
      Deliver(std::move(state->message));
    } else if (UCS_PTR_IS_ERR(request)) {
      // The sender's send completes with an error; nothing to deliver.
    } else {
      state.release();  // owned by OnRecvDone
    }
  }
}

void UcxTransport::OnRecvDone(void* request, ucs_status_t status, size_t length, void* user_data) {
  std::unique_ptr<RecvState> state(static_cast<RecvState*>(user_data));
  if (status == UCS_OK && length == state->message.bytes().size()) {
    state->transport->Deliver(std::move(state->message));
  }
  ucp_request_free(request);
}

void UcxTransport::Place(Message& message, size_t length) {
  if (handlers_.place_payload) {
    absl::Span<uint8_t> dest = handlers_.place_payload(message.from, message.header, length);
    if (dest.data() != nullptr && dest.size() == length) {
      message.placed = dest;
      return;
    }
  }
  message.payload.resize(length);
}

ucp_mem_h UcxTransport::MemhFor(const void* data, size_t size) {
  if (data == nullptr || size == 0) return nullptr;
  const auto addr = reinterpret_cast<uintptr_t>(data);
  absl::MutexLock lock(&regions_mu_);
  auto it = regions_.upper_bound(addr);
  if (it == regions_.begin()) return nullptr;
  --it;
  if (addr + size > it->first + it->second.size) return nullptr;
  return it->second.memh;
}

void UcxTransport::RunOnProgressThread(const std::function<void()>& command) {
  if (std::this_thread::get_id() == progress_thread_.load()) {
    command();
    return;
  }
  absl::Notification done;
  Post([&] {
    command();
    done.Notify();
  });
  done.WaitForNotification();
}

class UcxTransport::UcxRegion final : public MemoryRegion {
 public:
  UcxRegion(UcxTransport* transport, uintptr_t start) : transport_(transport), start_(start) {}
  ~UcxRegion() override { transport_->Unregister(start_); }

 private:
  UcxTransport* const transport_;
  const uintptr_t start_;
};

absl::StatusOr<std::unique_ptr<MemoryRegion>> UcxTransport::RegisterMemory(
    absl::Span<uint8_t> buffer) {
  if (buffer.empty()) return absl::InvalidArgumentError("empty buffer");
  const auto start = reinterpret_cast<uintptr_t>(buffer.data());
  {
    absl::MutexLock lock(&regions_mu_);
    auto next = regions_.lower_bound(start);
    if ((next != regions_.end() && next->first < start + buffer.size()) ||
        (next != regions_.begin() &&
         std::prev(next)->first + std::prev(next)->second.size > start)) {
      return absl::AlreadyExistsError("buffer overlaps a registered region");
    }
  }
  ucs_status_t status = UCS_OK;
  ucp_mem_h memh = nullptr;
  // The context is not shared between threads (no MT_WORKERS_SHARED): map
  // on the progress thread, which uses it.
  RunOnProgressThread([&] {
    ucp_mem_map_params_t params{};
    params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    params.address = buffer.data();
    params.length = buffer.size();
    status = ucp_mem_map(context_, &params, &memh);
  });
  if (status != UCS_OK) return UcxError("ucp_mem_map", status);
  {
    absl::MutexLock lock(&regions_mu_);
    regions_[start] = {.size = buffer.size(), .memh = memh};
  }
  return std::unique_ptr<MemoryRegion>(new UcxRegion(this, start));
}

void UcxTransport::Unregister(uintptr_t start) {
  ucp_mem_h memh = nullptr;
  {
    absl::MutexLock lock(&regions_mu_);
    auto it = regions_.find(start);
    if (it == regions_.end()) return;
    memh = it->second.memh;
    regions_.erase(it);
  }
  RunOnProgressThread([&] { ucp_mem_unmap(context_, memh); });
}

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> CreateUcxTransport(TransportHandlers handlers,
                                                              const UcxTransportOptions& options) {
  return UcxTransport::Create(std::move(handlers), options);
}

}  // namespace gift::transport
