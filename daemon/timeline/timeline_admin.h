// The Admin service's timeline calls on this daemon (proto/admin.proto StartTimeline,
// StopTimeline): arms and collects this host's recorder for a job and adds this host's clock
// offset to the coordinator, so the CLI can put every host on one time axis.
//
// Thread: handlers are called on gRPC threads and post to the control loop, which alone touches
// the Hub and the clock offset source.
#pragma once

#include <functional>
#include <string>

#include "daemon/cluster/handlers.h"
#include "daemon/common/event_loop.h"
#include "daemon/timeline/clock_offset.h"
#include "daemon/timeline/hub.h"

namespace ard::timeline {

class TimelineAdmin : public cluster::TimelineHandler {
 public:
  // `clock`: this host's offset estimate (called on the loop; null on the coordinator).
  TimelineAdmin(EventLoop& loop, Hub& hub, std::string host_name,
                std::function<const ClockOffset*()> clock)
      : loop_(loop), hub_(hub), host_name_(std::move(host_name)), clock_(std::move(clock)) {}

  void HandleStartTimeline(const StartTimelineRequest& request,
                           cluster::Done<StartTimelineResponse> done) override;
  void HandleStopTimeline(const StopTimelineRequest& request,
                          cluster::Done<StopTimelineResponse> done) override;

 private:
  EventLoop& loop_;
  Hub& hub_;  // Not owned.
  const std::string host_name_;
  const std::function<const ClockOffset*()> clock_;
};

}  // namespace ard::timeline
