#include "daemon/timeline/timeline_admin.h"

#include "absl/time/clock.h"

namespace ard::timeline {

void TimelineAdmin::HandleStartTimeline(const StartTimelineRequest& request,
                                        cluster::Done<StartTimelineResponse> done) {
  loop_.Post([this, request, done = std::move(done)] {
    if (request.job().empty()) return done(absl::InvalidArgumentError("no job name given"));
    const absl::Duration d =
        hub_.Start(request.job(), absl::Milliseconds(request.duration_ms()), absl::Now());
    StartTimelineResponse response;
    response.set_host(host_name_);
    response.set_duration_ms(absl::ToInt64Milliseconds(d));
    done(std::move(response));
  });
}

void TimelineAdmin::HandleStopTimeline(const StopTimelineRequest& request,
                                       cluster::Done<StopTimelineResponse> done) {
  loop_.Post([this, request, done = std::move(done)] {
    absl::StatusOr<Recording> recording = hub_.Stop(request.job());
    if (!recording.ok()) return done(recording.status());
    StopTimelineResponse response;
    response.set_host(host_name_);
    response.set_dropped(recording->dropped);
    const ClockOffset* clock = clock_ ? clock_() : nullptr;
    response.set_clock_offset_us(clock != nullptr ? clock->offset_us() : 0);
    response.set_clock_offset_error_us(clock != nullptr ? clock->error_us() : 0);
    response.mutable_events()->Reserve(recording->events.size());
    for (Event& e : recording->events) {
      TimelineEvent* out = response.add_events();
      out->set_time_us(e.time_us);
      out->set_mark(static_cast<uint32_t>(e.mark));
      out->set_rank(e.rank);
      out->set_group(e.group);
      out->set_tensor(std::move(e.tensor));
    }
    done(std::move(response));
  });
}

}  // namespace ard::timeline
