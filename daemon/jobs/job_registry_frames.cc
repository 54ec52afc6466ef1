// JobRegistry's routing of a registered process's local frames (HELLO aside: job_registry.cc):
// input segments and result releases stay with the session; SUBMIT and the GPU frames go to the
// process's job, once it formed.
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "daemon/jobs/job_registry.h"

namespace ard::jobs {

using local::Session;

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

}  // namespace ard::jobs
