#include "daemon/jobs/job_registry.h"

#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "daemon/common/logging.h"
#include "daemon/jobs/coordinated_negotiator.h"
#include "daemon/jobs/local_negotiator.h"

namespace ard::jobs {

using local::Session;

JobRegistry::JobRegistry(EventLoop& loop, JobOptions options)
    : loop_(loop), options_(std::move(options)) {
  if (options_.gpu_device != nullptr) gpu_ = std::make_unique<GpuProcesses>(*options_.gpu_device);
}

JobRegistry::~JobRegistry() { Shutdown(); }

void JobRegistry::Start() { ScheduleStallInspection(); }

void JobRegistry::EnableCrossHost(cluster::NegotiationClient* coordinator,
                                  dataplane::tcp::DataListener* listener,
                                  std::string data_address) {
  coordinator_ = coordinator;
  listener_ = listener;
  data_address_ = std::move(data_address);
}

void JobRegistry::ScheduleStallInspection() {
  // Often enough that a stall is reported within a quarter of stall_warning of its threshold.
  const absl::Duration every =
      std::max(absl::Milliseconds(50), std::min(absl::Seconds(5), options_.stall_warning / 4));
  loop_.PostAfter(every, [this] {
    if (shut_down_) return;
    const absl::Time now = absl::Now();
    for (auto& [name, job] : jobs_) job->InspectStalls(now);
    for (auto& job : retired_) job->InspectStalls(now);
    ScheduleStallInspection();
  });
}

void JobRegistry::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  for (auto& [name, job] : jobs_) job->Shutdown();
  for (auto& job : retired_) job->Shutdown();
  jobs_.clear();
  retired_.clear();
}

Job* JobRegistry::JobOf(const Session& s) {
  auto it = jobs_.find(s.job);
  if (it != jobs_.end() && it->second->id() == s.job_id) return it->second.get();
  for (auto& job : retired_) {
    if (job->id() == s.job_id) return job.get();
  }
  return nullptr;
}

void JobRegistry::Drop(const std::string& name, uint32_t id) {
  auto it = jobs_.find(name);
  RecordHandoff(it != jobs_.end() && it->second->id() == id ? it->second.get() : nullptr);
  for (const auto& job : retired_) {
    if (job->id() == id) RecordHandoff(job.get());
  }
  if (it != jobs_.end() && it->second->id() == id) jobs_.erase(it);
  const size_t retired = retired_.size();
  retired_.erase(std::remove_if(retired_.begin(), retired_.end(),
                                [id](const auto& job) { return job->id() == id; }),
                 retired_.end());
  if (retired_.size() != retired) TryFormElastic(name);  // its successor may form now
  if (handoffs_.count(name) != 0) {
    loop_.PostAfter(options_.elastic_settle + absl::Milliseconds(1),
                    [this, name] { TryFormElastic(name); });
  }
}

void JobRegistry::RecordHandoff(const Job* job) {
  if (job == nullptr || !job->elastic() || !job->reform_pending()) return;
  Handoff& h = handoffs_[job->name()];
  h.generation = std::max(h.generation, job->generation());
  const std::set<uint32_t> pids = job->ReturningPids();
  h.returning.insert(pids.begin(), pids.end());
  h.at = absl::Now();
}

Job* JobRegistry::NewJob(const std::string& name, int size, int local_size, uid_t uid,
                         std::unique_ptr<Negotiator> negotiator) {
  const uint32_t id = next_job_id_++;
  auto job = std::make_unique<Job>(JobEnvironment{loop_, options_, listener_, gpu_.get()}, id, name,
                                   size, local_size, uid, std::move(negotiator),
                                   [this, name, id] { Drop(name, id); });
  loop_.PostAfter(options_.form_timeout, [this, name, id] {
    auto j = jobs_.find(name);
    if (j != jobs_.end() && j->second->id() == id) j->second->FormTimeout();
  });
  return (jobs_[name] = std::move(job)).get();
}

void JobRegistry::HandleElasticHello(const std::shared_ptr<Session>& s, const wire::Hello& hello,
                                     int fd) {
  const std::string name = hello.job;
  auto it = jobs_.find(name);
  if (it != jobs_.end()) {
    absl::Status refused;
    if (it->second->uid() != s->creds().uid) {
      refused = absl::PermissionDeniedError(absl::StrCat("job ", name, " belongs to uid ",
                                                         it->second->uid(), "; a process of uid ",
                                                         s->creds().uid, " cannot join it"));
    } else if (!it->second->elastic()) {
      refused = absl::InvalidArgumentError(
          absl::StrCat("job ", name, " is not elastic but this process registers elastically"));
    } else {
      refused = it->second->CheckRoom(s->creds().pid);
    }
    if (!refused.ok()) {
      close(fd);
      return s->Reject(0, refused);
    }
  }
  if (auto st = s->input.AddSegment(0, fd, hello.segment_bytes); !st.ok()) {
    return s->Reject(0, st);
  }
  uint64_t previous_generation = 0;
  if (it != jobs_.end() &&
      (it->second->state() != JobState::kForming || it->second->formation_in_flight())) {
    // The generation that runs (or re-forms) stays until its processes detach; the new one
    // forms after that.
    previous_generation = it->second->generation();
    it->second->HostsUpdated();
    retired_.push_back(std::move(it->second));
    jobs_.erase(it);
    it = jobs_.end();
  }
  Job* job = it != jobs_.end() ? it->second.get() : nullptr;
  if (job == nullptr) {
    // The last generation here already ended (its processes left before this one came back).
    auto handoff = handoffs_.find(name);
    if (handoff != handoffs_.end() && absl::Now() - handoff->second.at > options_.form_timeout) {
      handoffs_.erase(handoff);
    } else if (handoff != handoffs_.end()) {
      previous_generation = std::max(previous_generation, handoff->second.generation);
    }
    ElasticSpec spec{static_cast<int>(hello.elastic_min_np), std::max(0, hello.size),
                     coordinator_ != nullptr, std::max(0, hello.local_size)};
    std::unique_ptr<Negotiator> negotiator;
    if (spec.coordinated) {
      negotiator = std::make_unique<CoordinatedNegotiator>(loop_, *coordinator_, options_,
                                                           data_address_, name, 0, 0, spec);
    } else {
      negotiator = std::make_unique<LocalNegotiator>(options_, 0, spec.max_np);
    }
    job = NewJob(name, 0, 0, s->creds().uid, std::move(negotiator));
    job->MakeElastic(spec, previous_generation);
  }
  s->job = name;
  s->job_id = job->id();
  s->rank = hello.rank;  // the process's place in rank order (renumbered at formation)
  s->local_rank = -1;
  job->AddMember(s);
  TryFormElastic(name);
  loop_.PostAfter(options_.elastic_settle + absl::Milliseconds(1),
                  [this, name] { TryFormElastic(name); });
}

void JobRegistry::TryFormElastic(const std::string& name) {
  auto it = jobs_.find(name);
  if (it == jobs_.end() || !it->second->elastic()) return;
  bool attached = false;
  for (const auto& job : retired_) {
    if (job->name() == name) attached = attached || job->attached();
  }
  auto handoff = handoffs_.find(name);
  it->second->MaybeFormElastic(
      attached, handoff != handoffs_.end() ? handoff->second.at : absl::InfinitePast(),
      handoff != handoffs_.end() ? handoff->second.returning : std::set<uint32_t>{},
      options_.elastic_settle);
  if (it->second->state() != JobState::kForming || it->second->formation_in_flight()) {
    handoffs_.erase(name);  // the successor formed (or is forming) with those present
  }
}

void JobRegistry::OnFrame(const std::shared_ptr<Session>& s, local::DecodedFrame frame, int fd) {
  switch (frame.type) {
    case wire::MsgType::kHello:
      return HandleHello(s, frame.hello, fd);
    case wire::MsgType::kAddSegment:
      if (s->job.empty()) {
        close(fd);
        return s->Reject(frame.request_id,
                         absl::FailedPreconditionError("ADD_SEGMENT before HELLO"));
      }
      if (auto st = s->input.AddSegment(frame.segment.index, fd, frame.segment.bytes); !st.ok()) {
        s->Reject(frame.request_id, st);
      }
      return;
    case wire::MsgType::kRelease:
      if (!s->Release(frame.request_id)) {
        s->Reject(frame.request_id,
                  absl::NotFoundError(
                      absl::StrCat("RELEASE of request ", frame.request_id, ": no result held")));
      }
      return;
    case wire::MsgType::kSubmit:
    case wire::MsgType::kGpuSubmit:
    case wire::MsgType::kGpuRegister: {
      if (options_.gpu_device == nullptr && frame.type != wire::MsgType::kSubmit) {
        return s->Reject(
            frame.request_id,
            absl::FailedPreconditionError(absl::StrCat(
                "no GPU on this daemon: ",
                options_.gpu_unavailable.empty() ? "no GPU device" : options_.gpu_unavailable)));
      }
      Job* job = s->welcomed ? JobOf(*s) : nullptr;
      if (job == nullptr) {
        return s->Reject(frame.request_id,
                         absl::FailedPreconditionError(absl::StrCat(
                             frame.type == wire::MsgType::kGpuRegister ? "GPU_REGISTER" : "SUBMIT",
                             " before the job formed (no WELCOME)")));
      }
      if (frame.type == wire::MsgType::kGpuRegister) return job->GpuRegister(s, frame);
      return job->Submit(s, std::move(frame));
    }
    default:
      if (fd >= 0) close(fd);
      s->Reject(frame.request_id, absl::InvalidArgumentError("unexpected frame"));
  }
}

void JobRegistry::HandleHello(const std::shared_ptr<Session>& s, const wire::Hello& hello, int fd) {
  if (!s->job.empty()) {
    close(fd);
    return s->Reject(0, absl::AlreadyExistsError(
                            absl::StrCat("this process already registered with job ", s->job)));
  }
  if (hello.elastic_min_np > 0) return HandleElasticHello(s, hello, fd);
  const std::string name = hello.job;
  const int size = hello.size >= 1 ? hello.size : hello.local_size >= 1 ? hello.local_size : 1;
  const bool cross_host = hello.local_size >= 1 && size > hello.local_size;
  if (cross_host && coordinator_ == nullptr) {
    close(fd);
    return s->Reject(0, absl::UnimplementedError(absl::StrCat(
                            "job ", name, " spans hosts (size ", size, ", local_size ",
                            hello.local_size, ") but cross-host jobs are not enabled here")));
  }
  auto it = jobs_.find(name);
  if (it == jobs_.end() && static_cast<int>(jobs_.size()) >= options_.max_jobs) {
    close(fd);
    return s->Reject(0, absl::ResourceExhaustedError(absl::StrCat(
                            "cannot start job ", name, ": this daemon already has ", jobs_.size(),
                            " jobs (max_jobs ", options_.max_jobs, ")")));
  }
  if (it != jobs_.end() && it->second->uid() != s->creds().uid) {
    close(fd);
    return s->Reject(0, absl::PermissionDeniedError(absl::StrCat(
                            "job ", name, " belongs to uid ", it->second->uid(),
                            "; a process of uid ", s->creds().uid, " cannot join it")));
  }
  if (auto st = s->input.AddSegment(0, fd, hello.segment_bytes); !st.ok()) {
    return s->Reject(0, st);
  }
  if (it != jobs_.end()) {
    if (absl::Status st = it->second->CheckHello(hello, size); !st.ok()) {
      return s->Reject(0, st);
    }
  } else {
    const int local_size = cross_host ? hello.local_size : size;
    std::unique_ptr<Negotiator> negotiator;
    if (cross_host) {
      negotiator = std::make_unique<CoordinatedNegotiator>(loop_, *coordinator_, options_,
                                                           data_address_, name, size, local_size);
    } else {
      negotiator = std::make_unique<LocalNegotiator>(options_, size);
    }
    NewJob(name, size, local_size, s->creds().uid, std::move(negotiator));
    it = jobs_.find(name);
  }
  s->job = name;
  s->job_id = it->second->id();
  s->rank = hello.rank;
  s->local_rank = hello.local_rank;
  it->second->AddMember(s);
}

void JobRegistry::OnClosed(const std::shared_ptr<Session>& s, bool graceful,
                           const std::string& why) {
  if (s->job.empty()) return;
  if (Job* job = JobOf(*s)) job->OnMemberClosed(s, graceful, why);
}

void JobRegistry::FailCrossHostJobs(const absl::Status& status) {
  for (auto& [name, job] : jobs_) {
    if (job->cross_host() && job->state() == JobState::kRunning) job->Fail(status, false);
  }
  for (auto& job : retired_) {
    if (job->cross_host() && job->state() == JobState::kRunning) job->Fail(status, false);
  }
}

std::vector<JobSummary> JobRegistry::Summaries() const {
  std::vector<JobSummary> out;
  const absl::Time now = absl::Now();
  for (const auto& [name, job] : jobs_) out.push_back(job->Summary(now));
  for (const auto& job : retired_) out.push_back(job->Summary(now));
  return out;
}

}  // namespace ard::jobs
