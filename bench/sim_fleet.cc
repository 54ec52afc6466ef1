#include "bench/sim_fleet.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <utility>

#include "bench/sim_tensors.h"
#include "daemon/common/version.h"

namespace ard::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kHeartbeatDeadline = std::chrono::seconds(10);
constexpr char kMadeUpDataAddress[] = "127.0.0.1:9";

void SetDeadline(grpc::ClientContext* context, std::chrono::seconds after) {
  context->set_deadline(std::chrono::system_clock::now() + after);
}

}  // namespace

struct SimFleet::Tag {
  virtual ~Tag() = default;
  virtual void Done(bool ok) = 0;
};

struct SimFleet::Host {
  int index = 0;
  std::string name;
  std::string instance_id;
  uint32_t incarnation = 0;
  int rank = -1;
  WatchStream* watch = nullptr;  // owned by itself; null once finished
  long committed = 0;            // tensors seen committed on the stream
  int steps_sent = 0;            // steady steps sent
  std::map<std::string, uint32_t> cache_ids;
};

template <class Response>
struct SimFleet::UnaryCall : Tag {
  SimFleet* fleet;
  grpc::ClientContext context;
  Response response;
  grpc::Status status;
  std::unique_ptr<grpc::ClientAsyncResponseReader<Response>> reader;
  std::function<void(const grpc::Status&, Response&)> done;
  void Done(bool) override {
    --fleet->pending_;
    done(status, response);
    delete this;
  }
};

// Start -> Read* -> Finish; deletes itself when Finish completes.
struct SimFleet::WatchStream : Tag {
  SimFleet* fleet;
  Host* host;
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientAsyncReader<JobEvent>> reader;
  JobEvent event;
  grpc::Status status;
  enum { kStarting, kReading, kFinishing } state = kStarting;
  void Done(bool ok) override {
    if (fleet->shut_down_) return void(delete this);  // no more operations on the queue
    if (state == kFinishing) {
      --fleet->pending_;
      host->watch = nullptr;
      if (!fleet->stopping_ && !fleet->leaving_)
        fleet->Fail("WatchJob of " + host->name + " ended: " + status.error_message());
      delete this;
      return;
    }
    if (!ok) {
      state = kFinishing;
      reader->Finish(&status, this);
      return;
    }
    if (state == kReading) fleet->OnEvent(*host, event);
    state = kReading;
    event.Clear();
    reader->Read(&event, this);
  }
};

SimFleet::SimFleet(FleetOptions options) : options_(std::move(options)) {
  const int per = std::max(1, options_.hosts_per_channel);
  for (int c = 0; c * per < options_.hosts; ++c) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(options_.max_receive_bytes);
    args.SetInt("ard.scale_sim.channel", c);  // distinct arguments: a connection of its own
    auto channel =
        grpc::CreateCustomChannel(options_.coordinator, grpc::InsecureChannelCredentials(), args);
    channels_.push_back({Cluster::NewStub(channel), Negotiation::NewStub(channel)});
    // Heartbeats on connections of their own: unread JobEvents on a shared connection would hold
    // its HTTP/2 flow-control window, and the beats behind it.
    args.SetInt("ard.scale_sim.heartbeats", 1);
    beat_stubs_.push_back(Cluster::NewStub(
        grpc::CreateCustomChannel(options_.coordinator, grpc::InsecureChannelCredentials(), args)));
  }
  options_.data_addresses.resize(options_.hosts, kMadeUpDataAddress);
  std::mt19937_64 random(std::random_device{}());
  for (int i = 0; i < options_.hosts; ++i) {
    auto host = std::make_unique<Host>();
    char name[32];
    std::snprintf(name, sizeof(name), "sim-%05d", i);
    host->index = i;
    host->name = name;
    host->instance_id = std::to_string(random());
    hosts_.push_back(std::move(host));
  }
}

SimFleet::~SimFleet() {
  stopping_ = true;
  for (auto& h : hosts_) {
    if (h->watch) h->watch->context.TryCancel();
  }
  StopBeats();
  // Every call and stream completes before the queue shuts down (cancelled ones promptly).
  const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(30);
  void* tag;
  bool ok;
  while (pending_ > 0 && cq_.AsyncNext(&tag, &ok, deadline) == grpc::CompletionQueue::GOT_EVENT) {
    static_cast<Tag*>(tag)->Done(ok);
  }
  shut_down_ = true;
  cq_.Shutdown();
  while (cq_.Next(&tag, &ok)) static_cast<Tag*>(tag)->Done(ok);
}

SimFleet::ChannelStubs& SimFleet::StubsOf(const Host& host) {
  return channels_[host.index / std::max(1, options_.hosts_per_channel)];
}

template <class Response, class Start>
void SimFleet::Call(Start start, std::function<void(const grpc::Status&, Response&)> done) {
  if (stopping_) return;
  auto* call = new UnaryCall<Response>;
  call->fleet = this;
  call->done = std::move(done);
  SetDeadline(&call->context, options_.phase_timeout);
  call->reader = start(&call->context, &cq_);
  call->reader->StartCall();
  ++pending_;
  call->reader->Finish(&call->response, &call->status, call);
}

void SimFleet::Fail(const std::string& what) {
  if (error_.empty()) error_ = what;
}

bool SimFleet::Pump(const std::function<bool()>& finished) {
  const auto deadline = std::chrono::system_clock::now() + options_.phase_timeout;
  // Wakes at least every 100 ms to look at the heartbeat thread's verdicts.
  const auto tick = std::chrono::milliseconds(100);
  while (error_.empty() && !finished()) {
    if (beat_failed_) {
      std::lock_guard<std::mutex> lock(beat_mu_);
      Fail(beat_error_);
      break;
    }
    void* tag;
    bool ok;
    const auto now = std::chrono::system_clock::now();
    if (now >= deadline) {
      Fail("phase did not finish within the phase timeout");
      break;
    }
    switch (cq_.AsyncNext(&tag, &ok, std::min(deadline, now + tick))) {
      case grpc::CompletionQueue::GOT_EVENT:
        static_cast<Tag*>(tag)->Done(ok);
        break;
      case grpc::CompletionQueue::TIMEOUT:
        break;
      case grpc::CompletionQueue::SHUTDOWN:
        return false;
    }
  }
  return error_.empty();
}

bool SimFleet::Join() {
  done_ = 0;
  for (auto& h : hosts_) {
    Host* host = h.get();
    JoinRequest request;
    HostInfo* info = request.mutable_host();
    info->set_name(host->name);
    info->set_address("127.0.0.1:9");  // never called: Identify is only asked of a name's holder
    info->set_version("scale_sim");
    info->set_protocol_version(kProtocolVersion);
    info->set_instance_id(host->instance_id);
    info->set_pid(getpid());
    info->set_data_address(options_.data_addresses[host->index]);
    Call<JoinResponse>(
        [&](grpc::ClientContext* c, grpc::CompletionQueue* cq) {
          return StubsOf(*host).cluster->PrepareAsyncJoin(c, request, cq);
        },
        [this, host](const grpc::Status& s, JoinResponse& r) {
          if (!s.ok()) return Fail("Join of " + host->name + ": " + s.error_message());
          host->incarnation = r.incarnation();
          if (r.heartbeat_ms() > 0) beat_every_ = std::chrono::milliseconds(r.heartbeat_ms());
          ++done_;
        });
  }
  if (!Pump([this] { return done_ == options_.hosts; })) return false;
  beat_thread_ = std::thread([this] { BeatLoop(); });
  return true;
}

void SimFleet::StopBeats() {
  {
    std::lock_guard<std::mutex> lock(beat_mu_);
    beat_stop_ = true;
  }
  beat_wake_.notify_all();
  if (beat_thread_.joinable()) beat_thread_.join();
}

void SimFleet::BeatLoop() {
  // One round per interval: every host beats once, and the round waits for every answer (one in
  // flight per host, as a real follower).
  grpc::CompletionQueue cq;
  struct Beat {
    grpc::ClientContext context;
    HeartbeatResponse response;
    grpc::Status status;
    std::unique_ptr<grpc::ClientAsyncResponseReader<HeartbeatResponse>> reader;
  };
  std::unique_lock<std::mutex> lock(beat_mu_);
  while (!beat_stop_) {
    const auto next = std::chrono::steady_clock::now() + beat_every_;
    lock.unlock();
    std::vector<Beat> beats(hosts_.size());
    for (size_t i = 0; i < hosts_.size(); ++i) {
      const Host& host = *hosts_[i];
      HeartbeatRequest request;
      request.set_host_name(host.name);
      request.set_incarnation(host.incarnation);
      request.set_instance_id(host.instance_id);
      SetDeadline(&beats[i].context, kHeartbeatDeadline);
      beats[i].reader =
          beat_stubs_[host.index / std::max(1, options_.hosts_per_channel)]->PrepareAsyncHeartbeat(
              &beats[i].context, request, &cq);
      beats[i].reader->StartCall();
      beats[i].reader->Finish(&beats[i].response, &beats[i].status, &beats[i]);
    }
    for (size_t i = 0; i < hosts_.size(); ++i) {
      void* tag;
      bool ok;
      if (!cq.Next(&tag, &ok)) break;
      const Beat& beat = *static_cast<Beat*>(tag);
      // As a real follower: a late or failed beat is not fatal; being marked DOWN is.
      if (!beat.status.ok()) {
        ++heartbeat_failures_;
      } else if (beat.response.verdict() != HeartbeatResponse::OK && !beat_failed_) {
        std::lock_guard<std::mutex> error_lock(beat_mu_);
        beat_error_ = "Heartbeat answered " +
                      HeartbeatResponse::Verdict_Name(beat.response.verdict()) + ": " +
                      beat.response.detail();
        beat_failed_ = true;
      }
    }
    lock.lock();
    beat_wake_.wait_until(lock, next, [this] { return beat_stop_; });
  }
  cq.Shutdown();
  void* tag;
  bool ok;
  while (cq.Next(&tag, &ok)) {
  }
}

bool SimFleet::Form() {
  if (!error_.empty()) return false;
  done_ = 0;
  for (auto& h : hosts_) {
    Host* host = h.get();
    RegisterRanksRequest request;
    request.set_job("scale_sim");
    request.set_host(host->name);
    request.set_size(options_.hosts);
    request.set_data_address(options_.data_addresses[host->index]);
    request.set_timeout_ms(std::chrono::milliseconds(options_.phase_timeout).count());
    auto* rank = request.add_ranks();
    rank->set_local_rank(0);
    rank->set_rank(-1);
    rank->set_pid(getpid());
    ++messages_.sent;
    Call<RegisterRanksResponse>(
        [&](grpc::ClientContext* c, grpc::CompletionQueue* cq) {
          return StubsOf(*host).negotiation->PrepareAsyncRegisterRanks(c, request, cq);
        },
        [this, host](const grpc::Status& s, RegisterRanksResponse& r) {
          if (!s.ok()) return Fail("RegisterRanks of " + host->name + ": " + s.error_message());
          ++messages_.received;
          const JobLayout& layout = r.layout();
          if (layout_hosts_ == 0) layout_ = layout;
          job_id_ = layout.job_id();
          generation_ = layout.generation();
          job_size_ = layout.size();
          layout_hosts_ = layout.hosts_size();
          for (const auto& jh : layout.hosts()) {
            if (jh.name() == host->name && jh.ranks_size() == 1) host->rank = jh.ranks(0);
          }
          if (host->rank < 0) return Fail("layout has no rank for " + host->name);
          ++done_;
        });
  }
  return Pump([this] { return done_ == options_.hosts; });
}

bool SimFleet::Watch() {
  if (!error_.empty()) return false;
  for (auto& h : hosts_) {
    auto* stream = new WatchStream;
    stream->fleet = this;
    stream->host = h.get();
    WatchJobRequest request;
    request.set_job_id(job_id_);
    request.set_generation(generation_);
    request.set_host(h->name);
    stream->reader = StubsOf(*h).negotiation->PrepareAsyncWatchJob(&stream->context, request, &cq_);
    h->watch = stream;
    ++pending_;
    stream->reader->StartCall(stream);
  }
  return true;  // events sent before a stream is open wait in the coordinator's backlog
}

void SimFleet::SendStep(Host& host, bool full) {
  NegotiateRequest request;
  request.set_job_id(job_id_);
  request.set_generation(generation_);
  request.set_host(host.name);
  for (int i = 0; i < options_.tensors; ++i) {
    const std::string name = SimTensorName(i);
    auto id = host.cache_ids.find(name);
    if (!full && id != host.cache_ids.end()) {
      request.add_cached_ids(id->second);
      continue;
    }
    HostReadyTensor* t = request.add_ready();
    t->set_name(name);
    *t->add_ranks() = SimTensorMeta(host.rank);
  }
  ++messages_.sent;
  Host* h = &host;
  Call<NegotiateResponse>(
      [&](grpc::ClientContext* c, grpc::CompletionQueue* cq) {
        return StubsOf(host).negotiation->PrepareAsyncNegotiate(c, request, cq);
      },
      [this, h](const grpc::Status& s, NegotiateResponse&) {
        if (!s.ok()) Fail("Negotiate of " + h->name + ": " + s.error_message());
      });
}

void SimFleet::OnEvent(Host& host, const JobEvent& event) {
  ++messages_.received;
  largest_event_bytes_ = std::max<long>(largest_event_bytes_, event.ByteSizeLong());
  if (event.abort_code() != 0) return Fail("job aborted: " + event.abort());
  if (options_.on_event) options_.on_event(host.index, event);
  for (const CacheEntry& put : event.cache_put()) host.cache_ids[put.name()] = put.id();
  const long before = host.committed;
  for (const CollectiveResponse& r : event.responses()) {
    if (r.error_code() != 0) return Fail("response error: " + r.error());
    host.committed += r.tensors_size();
  }
  // The first step ends at `tensors` commits, steady step k at tensors * (k + 2); a host has one
  // step in flight at a time.
  const long t = std::max(1, options_.tensors);
  if (before < t && host.committed >= t) ++done_;
  if (steps_ == 0) return;
  for (long k = std::max(0L, before / t - 1); k < host.committed / t - 1 && k < steps_; ++k) {
    if (++step_hosts_done_[k] == options_.hosts) {
      step_end_s_[k] = std::chrono::duration<double>(Clock::now() - phase_start_).count();
    }
  }
  if (host.steps_sent < steps_ && host.committed >= t * (host.steps_sent + 1)) {
    ++host.steps_sent;
    SendStep(host, false);
  }
}

bool SimFleet::FirstStep() {
  if (!error_.empty()) return false;
  done_ = 0;
  for (auto& h : hosts_) SendStep(*h, true);
  return Pump([this] { return done_ == options_.hosts; });
}

bool SimFleet::Steady(int steps) {
  if (!error_.empty()) return false;
  if (steps <= 0) return true;
  for (auto& h : hosts_) {
    if (static_cast<int>(h->cache_ids.size()) < options_.tensors) {
      Fail(h->name + " learnt " + std::to_string(h->cache_ids.size()) + " cache ids of " +
           std::to_string(options_.tensors));
      return false;
    }
  }
  steps_ = steps;
  step_hosts_done_.assign(steps, 0);
  step_end_s_.assign(steps, 0.0);
  phase_start_ = Clock::now();
  for (auto& h : hosts_) {
    h->steps_sent = 1;
    SendStep(*h, false);
  }
  return Pump([this] { return step_hosts_done_.back() == options_.hosts; });
}

void SimFleet::Leave() {
  if (!error_.empty()) return;
  StopBeats();      // a host that left would be told to rejoin
  leaving_ = true;  // the job ends once every host left: its streams end
  done_ = 0;
  for (auto& h : hosts_) {
    Host* host = h.get();
    NegotiateRequest left;
    left.set_job_id(job_id_);
    left.set_generation(generation_);
    left.set_host(host->name);
    left.set_left(true);
    Call<NegotiateResponse>(
        [&](grpc::ClientContext* c, grpc::CompletionQueue* cq) {
          return StubsOf(*host).negotiation->PrepareAsyncNegotiate(c, left, cq);
        },
        [](const grpc::Status&, NegotiateResponse&) {});
    LeaveRequest leave;
    leave.set_host_name(host->name);
    leave.set_incarnation(host->incarnation);
    leave.set_instance_id(host->instance_id);
    Call<LeaveResponse>(
        [&](grpc::ClientContext* c, grpc::CompletionQueue* cq) {
          return StubsOf(*host).cluster->PrepareAsyncLeave(c, leave, cq);
        },
        [this](const grpc::Status&, LeaveResponse&) { ++done_; });
  }
  Pump([this] { return done_ == options_.hosts; });
}

const std::string& SimFleet::host_name(int i) const { return hosts_[i]->name; }

long SimFleet::min_committed() const {
  long least = hosts_.empty() ? 0 : hosts_.front()->committed;
  for (const auto& h : hosts_) least = std::min(least, h->committed);
  return least;
}

}  // namespace ard::bench
