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

void JobRegistry::EnableCrossHost(cluster::PeerClient* coordinator,
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
    ScheduleStallInspection();
  });
}

void JobRegistry::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  for (auto& [name, job] : jobs_) job->Shutdown();
  jobs_.clear();
}

Job* JobRegistry::JobOf(const Session& s) {
  auto it = jobs_.find(s.job);
  return it == jobs_.end() ? nullptr : it->second.get();
}

void JobRegistry::Drop(const std::string& name, uint32_t id) {
  auto it = jobs_.find(name);
  if (it != jobs_.end() && it->second->id() == id) jobs_.erase(it);
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
                   absl::NotFoundError(absl::StrCat("RELEASE of request ", frame.request_id,
                                                    ": no result held")));
      }
      return;
    case wire::MsgType::kSubmit:
    case wire::MsgType::kGpuSubmit:
    case wire::MsgType::kGpuRegister: {
      if (options_.gpu_device == nullptr && frame.type != wire::MsgType::kSubmit) {
        return s->Reject(frame.request_id,
                          absl::FailedPreconditionError(absl::StrCat(
                              "no GPU on this daemon: ", options_.gpu_unavailable.empty()
                                                             ? "no GPU device"
                                                             : options_.gpu_unavailable)));
      }
      Job* job = s->welcomed ? JobOf(*s) : nullptr;
      if (job == nullptr) {
        return s->Reject(frame.request_id,
                          absl::FailedPreconditionError(absl::StrCat(
                              frame.type == wire::MsgType::kGpuRegister ? "GPU_REGISTER"
                                                                        : "SUBMIT",
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

void JobRegistry::HandleHello(const std::shared_ptr<Session>& s, const wire::Hello& hello,
                              int fd) {
  if (!s->job.empty()) {
    close(fd);
    return s->Reject(0, absl::AlreadyExistsError(absl::StrCat(
                                 "this process already registered with job ", s->job)));
  }
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
                                 "cannot start job ", name, ": this daemon already has ",
                                 jobs_.size(), " jobs (max_jobs ", options_.max_jobs, ")")));
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
    const uint32_t id = next_job_id_++;
    auto job = std::make_unique<Job>(JobEnvironment{loop_, options_, listener_, gpu_.get()}, id,
                                     name, size, local_size, s->creds().uid,
                                     std::move(negotiator), [this, name, id] { Drop(name, id); });
    loop_.PostAfter(options_.form_timeout, [this, name, id] {
      auto j = jobs_.find(name);
      if (j != jobs_.end() && j->second->id() == id) j->second->FormTimeout();
    });
    it = jobs_.emplace(name, std::move(job)).first;
  }
  s->job = name;
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
}

std::vector<JobSummary> JobRegistry::Summaries() const {
  std::vector<JobSummary> out;
  const absl::Time now = absl::Now();
  for (const auto& [name, job] : jobs_) out.push_back(job->Summary(now));
  return out;
}

}  // namespace ard::jobs
