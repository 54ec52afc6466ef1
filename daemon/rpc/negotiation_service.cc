#include "daemon/rpc/negotiation_service.h"

#include <deque>
#include <functional>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "daemon/rpc/unary_reactor.h"

namespace ard::rpc {
namespace {

// Writes one host's job events in order, one write in flight at a time. The JobCoordinator holds
// the Sink (shared); the reactor is owned by gRPC until OnDone, after which sends are dropped.
// When the host cancels the stream or its connection breaks, `on_cancel` gets the Sink (on a
// gRPC thread) and the call ends.
class JobEventWriter : public grpc::ServerWriteReactor<JobEvent> {
 public:
  class Sink : public cluster::JobEventSink {
   public:
    explicit Sink(JobEventWriter* writer) : writer_(writer) {}
    void Send(const JobEvent& event) override {
      absl::MutexLock lock(&mu_);
      if (writer_ != nullptr) writer_->Enqueue(event);
    }
    void Finish(const absl::Status& status) override {
      absl::MutexLock lock(&mu_);
      if (writer_ != nullptr) writer_->FinishWhenDrained(ToGrpcStatus(status));
    }
    void Detach() {
      absl::MutexLock lock(&mu_);
      writer_ = nullptr;
    }

   private:
    absl::Mutex mu_;
    JobEventWriter* writer_ ABSL_GUARDED_BY(mu_);
  };

  using OnCancelled = std::function<void(std::shared_ptr<cluster::JobEventSink>)>;
  explicit JobEventWriter(OnCancelled on_cancel)
      : sink_(std::make_shared<Sink>(this)), on_cancel_(std::move(on_cancel)) {}
  std::shared_ptr<Sink> sink() { return sink_; }

  // gRPC may run a reaction inline: never call StartWrite/Finish with mu_ held.
  void Enqueue(const JobEvent& event) {
    const JobEvent* next = nullptr;
    {
      absl::MutexLock lock(&mu_);
      if (finishing_) return;
      queue_.push_back(event);  // deque: references to queued events stay valid
      if (!writing_) {
        writing_ = true;
        next = &queue_.front();
      }
    }
    if (next != nullptr) StartWrite(next);
  }

  void FinishWhenDrained(grpc::Status status) {
    {
      absl::MutexLock lock(&mu_);
      if (finishing_) return;
      finishing_ = true;
      final_status_ = std::move(status);
      if (writing_) return;  // OnWriteDone finishes once the queue drained
    }
    Finish(final_status_);
  }

  void OnWriteDone(bool ok) override {
    const JobEvent* next = nullptr;
    bool finish = false;
    grpc::Status status;
    {
      absl::MutexLock lock(&mu_);
      queue_.pop_front();
      if (!ok) {
        queue_.clear();
        writing_ = false;
        if (!finishing_) {
          finishing_ = true;
          final_status_ = grpc::Status(grpc::StatusCode::UNAVAILABLE, "write failed");
        }
        finish = true;
      } else if (!queue_.empty()) {
        next = &queue_.front();
      } else {
        writing_ = false;
        finish = finishing_;
      }
      status = final_status_;
    }
    if (next != nullptr) StartWrite(next);
    if (finish) Finish(status);
  }

  void OnCancel() override {
    if (on_cancel_) on_cancel_(sink_);
    // A cancelled call still needs Finish before gRPC calls OnDone.
    FinishWhenDrained(grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled"));
  }

  void OnDone() override {
    sink_->Detach();
    delete this;
  }

 private:
  std::shared_ptr<Sink> sink_;
  const OnCancelled on_cancel_;
  absl::Mutex mu_;
  std::deque<JobEvent> queue_;  // front() is being written while writing_
  bool writing_ = false;
  bool finishing_ = false;
  grpc::Status final_status_;
};

}  // namespace

NegotiationService::NegotiationService(EventLoop& loop, cluster::JobCoordinator* coordinator,
                                       std::string coordinator_address)
    : NegotiationService(loop,
                         [coordinator, address = std::move(coordinator_address)](
                             bool) -> absl::StatusOr<cluster::JobCoordinator*> {
                           if (coordinator != nullptr) return coordinator;
                           return absl::FailedPreconditionError(absl::StrCat(
                               "not the coordinator; the coordinator is at ", address));
                         }) {}

NegotiationService::NegotiationService(EventLoop& loop, Lookup lookup)
    : loop_(loop), lookup_(std::move(lookup)) {}

grpc::ServerUnaryReactor* NegotiationService::RegisterRanks(grpc::CallbackServerContext* context,
                                                            const RegisterRanksRequest* request,
                                                            RegisterRanksResponse* response) {
  auto* reactor = context->DefaultReactor();
  loop_.Post([this, request = *request, done = FinishWith(reactor, response)]() mutable {
    absl::StatusOr<cluster::JobCoordinator*> coordinator = lookup_(true);
    if (!coordinator.ok()) return done(coordinator.status());
    (*coordinator)->HandleRegisterRanks(request, std::move(done));
  });
  return reactor;
}

grpc::ServerUnaryReactor* NegotiationService::Negotiate(grpc::CallbackServerContext* context,
                                                        const NegotiateRequest* request,
                                                        NegotiateResponse* response) {
  auto* reactor = context->DefaultReactor();
  loop_.Post([this, request = *request, done = FinishWith(reactor, response)]() mutable {
    absl::StatusOr<cluster::JobCoordinator*> coordinator = lookup_(false);
    if (!coordinator.ok()) return done(coordinator.status());
    (*coordinator)->HandleNegotiate(request, std::move(done));
  });
  return reactor;
}

grpc::ServerWriteReactor<JobEvent>* NegotiationService::WatchJob(
    grpc::CallbackServerContext* context, const WatchJobRequest* request) {
  // The JobCoordinator that took the Watch hears when it ends (set on the loop, read there).
  auto watched = std::make_shared<cluster::JobCoordinator*>(nullptr);
  // OnCancel runs only once this handler returned: its post follows the Watch posted below.
  auto* writer = new JobEventWriter([this, request = *request, watched](auto sink) {
    loop_.Post([request, watched, sink = std::move(sink)]() mutable {
      if (*watched != nullptr) (*watched)->OnWatchEnded(request, std::move(sink));
    });
  });
  loop_.Post([this, request = *request, sink = writer->sink(), watched] {
    absl::StatusOr<cluster::JobCoordinator*> coordinator = lookup_(false);
    if (!coordinator.ok()) return sink->Finish(coordinator.status());
    *watched = *coordinator;
    absl::Status s = (*coordinator)->Watch(request, sink);
    if (!s.ok()) sink->Finish(s);
  });
  return writer;
}

}  // namespace ard::rpc
