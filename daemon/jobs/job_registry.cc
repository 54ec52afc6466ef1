#include "daemon/jobs/job_registry.h"

#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "daemon/common/logging.h"
#include "daemon/jobs/hello_admission.h"
#include "daemon/jobs/negotiator_choice.h"

namespace ard::jobs {

using local::Session;

JobRegistry::JobRegistry(EventLoop& loop, JobOptions options)
    : loop_(loop),
      options_(std::move(options)),
      succession_(options_.form_timeout, options_.elastic_settle) {
  if (options_.gpu_device != nullptr) gpu_ = std::make_unique<GpuProcesses>(*options_.gpu_device);
}

JobRegistry::~JobRegistry() { Shutdown(); }

void JobRegistry::ScheduleStallInspection() {
  // Often enough that a stall is reported within a quarter of stall_warning of its threshold.
  const absl::Duration every =
      std::max(absl::Milliseconds(50), std::min(absl::Seconds(5), options_.stall_warning / 4));
  loop_.PostAfter(every, [this] {
    if (shut_down_) return;
    const absl::Time now = absl::Now();
    ForEachJob([now](Job& job) { job.InspectStalls(now); });
    ScheduleStallInspection();
  });
}

void JobRegistry::ForEachJob(const std::function<void(Job&)>& f) {
  for (auto& [name, job] : jobs_) f(*job);
  succession_.ForEach(f);
}

void JobRegistry::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  ForEachJob([](Job& job) { job.Shutdown(); });
  jobs_.clear();
  succession_.Clear();
}

Job* JobRegistry::JobOf(const Session& s) {
  auto it = jobs_.find(s.job);
  if (it != jobs_.end() && it->second->id() == s.job_id) return it->second.get();
  return succession_.Find(s.job_id);
}

void JobRegistry::Drop(const std::string& name, uint32_t id) {
  auto it = jobs_.find(name);
  const bool current = it != jobs_.end() && it->second->id() == id;
  if (Job* ended = current ? it->second.get() : succession_.Find(id)) succession_.Ended(*ended);
  if (current) jobs_.erase(it);
  if (succession_.Drop(id)) succession_.TryForm(Find(name));  // its successor may form now
  if (succession_.awaited(name)) TryFormSettled(name);
}

void JobRegistry::TryFormSettled(const std::string& name) {
  loop_.PostAfter(options_.elastic_settle + absl::Milliseconds(1),
                  [this, name] { TryFormPolling(name, false); });
}

void JobRegistry::TryFormPolling(const std::string& name, bool polled) {
  if (shut_down_) return;
  if (polled) polling_.erase(name);
  Job* job = Find(name);
  succession_.TryForm(job);
  // Still waiting: for a survivor that runs, which may yet die with nothing else to tell.
  if (job == nullptr || !job->elastic() || job->state() != JobState::kForming ||
      job->formation_in_flight() || !polling_.insert(name).second) {
    return;
  }
  loop_.PostAfter(options_.elastic_settle / 4, [this, name] { TryFormPolling(name, true); });
}

Job* JobRegistry::NewJob(const std::string& name, int size, int local_size, uid_t uid,
                         ElasticSpec spec) {
  const uint32_t id = next_job_id_++;
  auto job = std::make_unique<Job>(
      JobEnvironment{loop_, options_, listener_, gpu_.get()}, id, name, size, local_size, uid,
      ChooseNegotiator(NegotiatorDeps{loop_, options_, coordinator_, data_address_}, name, size,
                       local_size, spec),
      [this, name, id] { Drop(name, id); });
  loop_.PostAfter(options_.form_timeout, [this, name, id] {
    auto j = jobs_.find(name);
    if (j != jobs_.end() && j->second->id() == id) j->second->FormTimeout();
  });
  return (jobs_[name] = std::move(job)).get();
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
    case wire::MsgType::kGpuUnregister: {
      // Nothing of this process is held without a job (or without a GPU): answered at once.
      Job* job = s->welcomed && options_.gpu_device != nullptr ? JobOf(*s) : nullptr;
      if (job != nullptr) return job->GpuUnregister(s, frame.request_id);
      s->Send(local::EncodeEmpty(wire::MsgType::kGpuUnregistered, frame.request_id));
      return;
    }
    default:
      if (fd >= 0) close(fd);
      s->Reject(frame.request_id, absl::InvalidArgumentError("unexpected frame"));
  }
}

void JobRegistry::HandleHello(const std::shared_ptr<Session>& s, const wire::Hello& hello, int fd) {
  const std::string name = hello.job;
  auto it = jobs_.find(name);
  absl::Status refused =
      s->job.empty()
          ? Admit(hello, s->creds().uid, s->creds().pid,
                  it == jobs_.end() ? nullptr : it->second.get(),
                  {coordinator_ != nullptr, static_cast<int>(jobs_.size()), options_.max_jobs})
          : absl::AlreadyExistsError(
                absl::StrCat("this process already registered with job ", s->job));
  if (!refused.ok()) {
    close(fd);
    return s->Reject(0, refused);
  }
  if (auto st = s->input.AddSegment(0, fd, hello.segment_bytes); !st.ok()) {
    return s->Reject(0, st);
  }
  const bool elastic = hello.elastic_min_np > 0;
  Job* job = nullptr;
  if (elastic) {
    const ElasticSpec spec = ElasticSpecOf(hello, coordinator_ != nullptr);
    job = succession_.Join(jobs_, name, [&](uint64_t previous) {
      Job* next = NewJob(name, 0, 0, s->creds().uid, spec);
      next->MakeElastic(spec, previous);
      return next;
    });
  } else if (it != jobs_.end()) {
    if (absl::Status st = it->second->CheckHello(hello, ShapeOf(hello).size); !st.ok()) {
      return s->Reject(0, st);
    }
    job = it->second.get();
  } else {
    const HelloShape shape = ShapeOf(hello);
    job = NewJob(name, shape.size, shape.local_size, s->creds().uid, ElasticSpec{});
  }
  s->job = name;
  s->job_id = job->id();
  s->rank = hello.rank;  // elastic: the process's place in rank order (renumbered at formation)
  s->local_rank = elastic ? -1 : hello.local_rank;
  job->AddMember(s);
  if (!elastic) return;
  succession_.TryForm(job);
  TryFormSettled(name);
}

void JobRegistry::OnClosed(const std::shared_ptr<Session>& s, bool graceful,
                           const std::string& why) {
  if (s->job.empty()) return;
  if (Job* job = JobOf(*s)) job->OnMemberClosed(s, graceful, why);
}

void JobRegistry::FailCrossHostJobs(const absl::Status& status) {
  ForEachJob([&](Job& job) {
    if (job.cross_host() && job.state() == JobState::kRunning) job.Fail(status, false);
  });
}

std::vector<JobSummary> JobRegistry::Summaries() const {
  std::vector<JobSummary> out;
  const absl::Time now = absl::Now();
  for (const auto& [name, job] : jobs_) out.push_back(job->Summary(now));
  succession_.ForEach([&](const Job& job) { out.push_back(job.Summary(now)); });
  return out;
}

}  // namespace ard::jobs
