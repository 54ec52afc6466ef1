#include "daemon/jobs/job_registry.h"

#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/common/logging.h"
#include "daemon/jobs/local_job.h"
#include "daemon/negotiation/tensor_request.h"
#include "daemon/shm/result_arena.h"

namespace ard::jobs {

using dataplane::Executor;
using local::Session;
using negotiation::TensorRequest;

JobRegistry::JobRegistry(EventLoop& loop, JobOptions options)
    : loop_(loop), options_(std::move(options)) {
  if (options_.gpu_device != nullptr) {
    ipc_cache_ = std::make_unique<gpu::IpcCache>(*options_.gpu_device);
  }
}

JobRegistry::~JobRegistry() { Shutdown(); }

void JobRegistry::Start() { ScheduleStallInspection(); }

void JobRegistry::ScheduleStallInspection() {
  // Often enough that a stall is reported within a quarter of stall_warning of its threshold.
  const absl::Duration every =
      std::max(absl::Milliseconds(50), std::min(absl::Seconds(5), options_.stall_warning / 4));
  loop_.PostAfter(every, [this] {
    if (shut_down_) return;
    InspectStalls();
    ScheduleStallInspection();
  });
}

void JobRegistry::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  for (auto& [name, job] : jobs_) {
    if (job->state != LocalJob::State::kFailed) {
      FailJob(*job, absl::UnavailableError("allreduced is shutting down"));
    }
    if (job->gpu) job->gpu->Stop();
    if (job->executor) job->executor->Stop();
  }
  jobs_.clear();
}

void JobRegistry::ReplyError(Session& s, uint64_t request_id, const absl::Status& status) {
  Logger("local")->warn("rejected request pid={} job={} rank={} error=\"{}\"", s.creds().pid,
                        s.job.empty() ? "-" : s.job, s.rank, status.message());
  s.Send(local::EncodeError(wire::MsgType::kError, request_id,
                            static_cast<int32_t>(status.code()), std::string(status.message())));
}

void JobRegistry::OnFrame(const std::shared_ptr<Session>& s, local::DecodedFrame frame, int fd) {
  switch (frame.type) {
    case wire::MsgType::kHello:
      HandleHello(s, frame.hello, fd);
      return;
    case wire::MsgType::kAddSegment:
      if (s->job.empty()) {
        close(fd);
        ReplyError(*s, frame.request_id,
                   absl::FailedPreconditionError("ADD_SEGMENT before HELLO"));
        return;
      }
      if (auto st = s->input.AddSegment(frame.segment.index, fd, frame.segment.bytes); !st.ok()) {
        ReplyError(*s, frame.request_id, st);
      }
      return;
    case wire::MsgType::kSubmit:
      HandleSubmit(s, std::move(frame));
      return;
    case wire::MsgType::kRelease:
      HandleRelease(s, frame.request_id);
      return;
    case wire::MsgType::kGpuRegister:
      HandleGpuRegister(s, frame);
      return;
    case wire::MsgType::kGpuSubmit:
      if (options_.gpu_device == nullptr) {
        ReplyError(*s, frame.request_id,
                   absl::FailedPreconditionError(absl::StrCat(
                       "no GPU on this daemon: ", options_.gpu_unavailable.empty()
                                                      ? "no GPU device"
                                                      : options_.gpu_unavailable)));
        return;
      }
      HandleSubmit(s, std::move(frame));
      return;
    default:
      if (fd >= 0) close(fd);
      ReplyError(*s, frame.request_id, absl::InvalidArgumentError("unexpected frame"));
  }
}

void JobRegistry::HandleHello(const std::shared_ptr<Session>& s, const wire::Hello& hello,
                              int fd) {
  if (!s->job.empty()) {
    close(fd);
    ReplyError(*s, 0, absl::AlreadyExistsError(
                          absl::StrCat("this process already registered with job ", s->job)));
    return;
  }
  const std::string name = hello.job;
  const int size = hello.size >= 1 ? hello.size : hello.local_size >= 1 ? hello.local_size : 1;
  const bool cross_host = hello.local_size >= 1 && size > hello.local_size;
  if (cross_host && coordinator_ == nullptr) {
    close(fd);
    ReplyError(*s, 0, absl::UnimplementedError(absl::StrCat(
                          "job ", name, " spans hosts (size ", size, ", local_size ",
                          hello.local_size, ") but cross-host jobs are not enabled here")));
    return;
  }
  auto it = jobs_.find(name);
  if (it == jobs_.end() && static_cast<int>(jobs_.size()) >= options_.max_jobs) {
    close(fd);
    ReplyError(*s, 0, absl::ResourceExhaustedError(absl::StrCat(
                          "cannot start job ", name, ": this daemon already has ", jobs_.size(),
                          " jobs (max_jobs ", options_.max_jobs, ")")));
    return;
  }
  if (it != jobs_.end() && it->second->uid != s->creds().uid) {
    close(fd);
    ReplyError(*s, 0, absl::PermissionDeniedError(absl::StrCat(
                          "job ", name, " belongs to uid ", it->second->uid,
                          "; a process of uid ", s->creds().uid, " cannot join it")));
    return;
  }
  if (auto st = s->input.AddSegment(0, fd, hello.segment_bytes); !st.ok()) {
    ReplyError(*s, 0, st);
    return;
  }
  if (it != jobs_.end() && it->second->state != LocalJob::State::kForming) {
    LocalJob& old = *it->second;
    ReplyError(*s, 0, absl::AlreadyExistsError(
                          old.state == LocalJob::State::kRunning
                              ? absl::StrCat("job ", name, " is already running with ", old.size,
                                             " ranks; use another ALLREDUCED_JOB name")
                              : absl::StrCat("job ", name, " failed (", old.failure, ") and ",
                                             old.connected(),
                                             " of its processes are still attached")));
    return;
  }
  if (it == jobs_.end()) {
    auto job = std::make_unique<LocalJob>();
    job->name = name;
    job->id = next_job_id_++;
    job->size = size;
    job->cross_host = cross_host;
    job->local_size = cross_host ? hello.local_size : size;
    job->created = absl::Now();
    job->uid = s->creds().uid;
    const uint64_t id = job->id;
    loop_.PostAfter(options_.form_timeout, [this, name, id] { FormTimeout(name, id); });
    it = jobs_.emplace(name, std::move(job)).first;
  }
  LocalJob& job = *it->second;
  for (const auto& m : job.members) {
    const bool same_rank = hello.rank >= 0 && m->rank == hello.rank;
    const bool same_local = hello.local_rank >= 0 && m->local_rank == hello.local_rank;
    if (job.size != size || same_rank || same_local || job.cross_host != cross_host ||
        (cross_host && job.local_size != hello.local_size)) {
      ReplyError(*s, 0, absl::InvalidArgumentError(
                            job.size != size
                                ? absl::StrCat("job ", name, " has size ", job.size, " (",
                                               job.local_size, " on this host) but this process says ",
                                               size, " (", hello.local_size, ")")
                                : absl::StrCat("job ", name, ": rank ",
                                               same_rank ? hello.rank : hello.local_rank,
                                               " registered twice")));
      return;
    }
  }
  s->job = name;
  s->rank = hello.rank;
  s->local_rank = hello.local_rank;
  job.members.push_back(s);
  if (static_cast<int>(job.members.size()) == job.local_size) {
    job.cross_host ? RegisterCrossHost(job) : Form(job);
  }
}

void JobRegistry::Form(LocalJob& job) {
  // Ranks the launcher gave are kept; the rest are assigned by local rank, then arrival order.
  std::vector<std::shared_ptr<Session>> by_rank(job.size);
  std::vector<std::shared_ptr<Session>> unranked;
  for (auto& m : job.members) {
    if (m->rank >= 0) {
      by_rank[m->rank] = m;
    } else {
      unranked.push_back(m);
    }
  }
  std::stable_sort(unranked.begin(), unranked.end(), [](const auto& a, const auto& b) {
    return (a->local_rank < 0 ? INT32_MAX : a->local_rank) <
           (b->local_rank < 0 ? INT32_MAX : b->local_rank);
  });
  size_t next = 0;
  for (int r = 0; r < job.size; ++r) {
    if (!by_rank[r]) {
      by_rank[r] = unranked[next++];
      by_rank[r]->rank = r;
    }
  }
  job.members = by_rank;
  auto arena = shm::ResultArena::Create(job.name, options_.result_segment_bytes,
                                        options_.max_result_bytes);
  if (!arena.ok()) {
    for (auto& m : job.members) ReplyError(*m, 0, arena.status());
    FailJob(job, arena.status());
    return;
  }
  job.context = std::make_shared<dataplane::JobContext>();
  job.context->name = job.name;
  job.context->id = job.id;
  job.context->size = job.size;
  job.context->ranks = job.members;
  job.context->results = *arena;
  job.table = std::make_unique<negotiation::ReadinessTable>(job.size);
  job.executor = std::make_unique<Executor>(job.context);
  job.state = LocalJob::State::kRunning;
  auto segment = (*arena)->segment(0);
  for (auto& m : job.members) {
    m->local_rank = m->rank;
    m->welcomed = true;
    wire::Welcome w{};
    w.rank = w.local_rank = m->rank;
    w.size = w.local_size = job.size;
    w.cross_rank = 0;
    w.cross_size = 1;
    w.result_segment_bytes = segment->size();
    w.max_tensor_bytes = wire::kMaxTensorBytes;
    w.job_id = job.id;
    m->Send(local::EncodeWelcome(w), segment->readonly_fd());
  }
  Logger("local")->info("job formed job={} id={} size={} host={}", job.name, job.id, job.size,
                        options_.host_name);
}

void JobRegistry::FormTimeout(const std::string& name, uint64_t job_id) {
  auto it = jobs_.find(name);
  if (it == jobs_.end() || it->second->id != job_id) return;
  LocalJob& job = *it->second;
  if (job.state != LocalJob::State::kForming) return;
  std::vector<int> have;
  for (const auto& m : job.members) {
    if (m->rank >= 0) have.push_back(m->rank);
  }
  std::sort(have.begin(), have.end());
  const absl::Status status = absl::DeadlineExceededError(absl::StrCat(
      "job ", name, " did not form within ", absl::FormatDuration(options_.form_timeout), ": ",
      job.members.size(), " of ", job.size, " ranks registered",
      have.empty() ? "" : absl::StrCat(" (ranks ", absl::StrJoin(have, ", "), ")"),
      "; check ALLREDUCED_JOB / the launcher's rank and size variables"));
  Logger("local")->warn("{}", status.message());
  for (auto& m : job.members) {
    ReplyError(*m, 0, status);
    m->job.clear();
    m->rank = -1;
  }
  jobs_.erase(it);
}

void JobRegistry::HandleSubmit(const std::shared_ptr<Session>& s, local::DecodedFrame frame) {
  const uint64_t id = frame.request_id;
  if (!s->welcomed) {
    ReplyError(*s, id, absl::FailedPreconditionError("SUBMIT before the job formed (no WELCOME)"));
    return;
  }
  LocalJob& job = *jobs_.at(s->job);
  TensorRequest request;
  request.rank = s->rank;
  request.request_id = id;
  request.meta = frame.submit;
  request.splits = std::move(frame.splits);
  if (!s->BeginRequest(id, request.name())) {
    ReplyError(*s, id, absl::InvalidArgumentError(absl::StrCat(
                           "tensor ", request.name(), " (request ", id,
                           ") is already in flight from rank ", s->rank)));
    return;
  }
  auto reject = [&](const absl::Status& status) {
    Executor::SendComplete(*s, request, status, nullptr);
  };
  if (job.state == LocalJob::State::kRunning && !job.departed.ok()) FailJob(job, job.departed);
  if (job.state == LocalJob::State::kFailed) return reject(job.context->failure());
  if (job.table->pending_tensors() >= options_.max_pending_tensors &&
      !job.table->is_pending(request.name())) {
    const absl::Status full = absl::ResourceExhaustedError(absl::StrCat(
        "job ", job.name, " already has ", job.table->pending_tensors(),
        " tensors submitted by some ranks but not all (max_pending_tensors); tensor ",
        request.name(), " from rank ", s->rank, " refused"));
    if (!job.pending_cap_logged) {
      job.pending_cap_logged = true;
      Logger("local")->warn("{} (logged once per job)", full.message());
    }
    return reject(full);
  }
  if (frame.type == wire::MsgType::kGpuSubmit) {
    if (absl::Status st = CheckGpuSubmit(job, *s, frame); !st.ok()) return reject(st);
    request.gpu = frame.gpu_placement;
  } else {
    auto input =
        s->input.Resolve(frame.submit.segment, frame.submit.offset, frame.submit.bytes);
    if (!input.ok()) return reject(input.status());
    request.input = *std::move(input);
  }
  std::vector<negotiation::Response> ready;
  const bool join = request.collective() == wire::Collective::kJoin;
  TensorRequest join_copy = join ? request : TensorRequest();
  if (auto st = job.table->Submit(std::move(request), absl::Now(), &ready); !st.ok()) {
    return reject(st);
  }
  if (job.cross_host) {
    if (join) ForwardJoin(job, join_copy);
    ForwardHostReady(job, std::move(ready));
    return;
  }
  for (auto& response : ready) {
    if (DispatchGpu(job, response)) continue;
    if (!job.executor->TryRunInline(response)) job.executor->Enqueue(std::move(response));
  }
}

void JobRegistry::HandleRelease(const std::shared_ptr<Session>& s, uint64_t request_id) {
  if (!s->Release(request_id)) {
    ReplyError(*s, request_id, absl::NotFoundError(absl::StrCat(
                                   "RELEASE of request ", request_id, ": no result held")));
  }
}

void JobRegistry::OnClosed(const std::shared_ptr<Session>& s, bool graceful,
                           const std::string& why) {
  if (s->job.empty()) return;
  auto it = jobs_.find(s->job);
  if (it == jobs_.end()) return;
  LocalJob& job = *it->second;
  if (job.state == LocalJob::State::kForming) {
    job.members.erase(std::remove(job.members.begin(), job.members.end(), s), job.members.end());
  } else if (job.state == LocalJob::State::kRunning && job.connected() > 0) {
    absl::Status gone = absl::AbortedError(absl::StrCat(
        "rank ", s->rank, " (pid ", s->creds().pid, ") on host ", options_.host_name, " ", why,
        "; job ", job.name, " cannot continue"));
    // A rank that shut down cleanly with nothing outstanding is the normal end of a job: the
    // others fail only if they still need it (now, or at their next submit).
    if (graceful && job.table->pending_tensors() == 0) {
      job.departed = gone;
    } else {
      FailJob(job, gone);
    }
  }
  ReleaseGpu(job, *s);
  RemoveIfEmpty(job.name);
}

void JobRegistry::FailJob(LocalJob& job, absl::Status status, bool tell_coordinator) {
  job.state = LocalJob::State::kFailed;
  job.failure = std::string(status.message());
  if (job.context == nullptr || !job.context->Fail(status)) return;
  if (job.gpu) job.gpu->job().Abort(status);
  if (job.cross_host && tell_coordinator) TellCoordinator(job, status, false);
  Logger("local")->warn("job failed job={} id={} error=\"{}\"", job.name, job.id,
                        status.message());
  const std::string notify = local::EncodeError(
      wire::MsgType::kNotify, 0, static_cast<int32_t>(status.code()), job.failure);
  for (const auto& m : job.members) {
    if (m != nullptr) m->Send(notify);
  }
  for (const TensorRequest& r : job.table->TakeAll()) {
    Executor::SendComplete(*job.members[r.rank], r, status, nullptr);
  }
  // Host-ready tensors still waiting for the coordinator.
  for (auto& [name, tensor] : job.awaiting) {
    for (const auto& r : tensor.ranks) {
      if (r && job.members[r->rank] != nullptr) {
        Executor::SendComplete(*job.members[r->rank], *r, status, nullptr);
      }
    }
  }
  job.awaiting.clear();
}

void JobRegistry::RemoveIfEmpty(const std::string& name) {
  auto it = jobs_.find(name);
  if (it == jobs_.end() || it->second->connected() > 0) return;
  LocalJob& job = *it->second;
  if (job.cross_host && job.state == LocalJob::State::kRunning) {
    TellCoordinator(job, absl::OkStatus(), /*left=*/true);
  }
  if (job.watch) job.watch->Cancel();
  if (job.context) job.context->Fail(absl::CancelledError("job ended"));  // unblocks the mesh
  if (job.gpu) job.gpu->Stop();
  if (job.executor) job.executor->Stop();
  Logger("local")->info("job removed job={} id={} state={} collectives={}", job.name, job.id,
                        job.state == LocalJob::State::kFailed ? "failed" : "done",
                        job.context ? job.context->collectives_completed.load() : 0);
  jobs_.erase(it);
}

}  // namespace ard::jobs
