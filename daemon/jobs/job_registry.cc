#include "daemon/jobs/job_registry.h"

#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "daemon/common/logging.h"
#include "daemon/gpu/device.h"
#include "daemon/jobs/hello_admission.h"
#include "daemon/jobs/negotiator_choice.h"

namespace ard::jobs {

using local::Session;

JobRegistry::JobRegistry(EventLoop& loop, JobOptions options)
    : loop_(loop),
      options_(std::move(options)),
      succession_(options_.form_timeout, options_.elastic_settle),
      ended_(cluster::JobHistory::kEndedJobsKept, cluster::JobHistory::kEndedJobsMaxAge) {
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
    InspectGpu();
    ScheduleStallInspection();
  });
}

void JobRegistry::InspectGpu() {
  if (options_.gpu_device == nullptr || gpu_lost_) return;
  const absl::Status lost = options_.gpu_device->Lost();
  if (lost.ok()) return;
  gpu_lost_ = true;
  // The context stays unusable until the process exits (CUDA's sticky errors): no job here can
  // use the GPU again, and recovering in-process is not possible. Every job fails with the cause;
  // the daemon then exits (systemd restarts it with fresh contexts) once the failures are sent.
  const absl::Status status = gpu::StickyError(absl::UnavailableError(absl::StrCat(
      "this host's GPU context is unusable (", lost.message(), "); allreduced on host ",
      options_.host_name, " restarts; start the job again")));
  Logger("daemon")->critical("{}", status.message());
  ForEachJob([&](Job& job) { job.Fail(status); });
  if (on_gpu_lost_) {
    loop_.PostAfter(absl::Seconds(1), [this, status] { on_gpu_lost_(status); });
  }
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
  if (current) {
    RecordEnded(*it->second);
    jobs_.erase(it);
  }
  if (succession_.Drop(id)) succession_.TryForm(Find(name));  // its successor may form now
  if (succession_.awaited(name)) TryFormSettled(name);
}

void JobRegistry::RecordEnded(const Job& job) {
  if (job.cross_host()) return;  // the coordinator's history has it
  const absl::Time now = absl::Now();
  JobSummary last = job.Summary(now);
  if (job.failed()) last.set_state(JobStateName(JobState::kFailed));  // then every process left
  ended_.Add(std::move(last), now);
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
  if (hello.elastic_min_np > 0) {
    s->job = name;
    s->rank = hello.rank;  // the process's place in rank order (renumbered at formation)
    s->local_rank = -1;
    return JoinElastic(s, ElasticSpecOf(hello, coordinator_ != nullptr));
  }
  Job* job = nullptr;
  if (it != jobs_.end()) {
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
  s->rank = hello.rank;
  s->local_rank = hello.local_rank;
  job->AddMember(s);
}

void JobRegistry::JoinElastic(const std::shared_ptr<Session>& s, const ElasticSpec& spec) {
  const std::string name = s->job;
  Job* job = succession_.Join(jobs_, name, [&](uint64_t previous) {
    Job* next = NewJob(name, 0, 0, s->creds().uid, spec);
    next->MakeElastic(spec, previous, [this, spec](std::vector<std::shared_ptr<Session>> late) {
      for (const auto& m : late) {
        if (m->closed()) {
          m->job.clear();
        } else {
          JoinElastic(m, spec);
        }
      }
    });
    return next;
  });
  s->job_id = job->id();
  job->AddMember(s);
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
