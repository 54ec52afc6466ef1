// The coordinator role on a real event loop with a scripted Identify: a Join for a name that an UP
// member holds asks that member first; a holder answering as itself keeps the name, a silent one or
// a different instance at its address (a restart there) hands it over. A Join of another protocol
// version is refused.
#include "daemon/cluster/coordinator.h"

#include <deque>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "catch2/catch.hpp"
#include "daemon/common/version.h"

namespace ard::cluster {
namespace {

HostInfo Info(const std::string& name, const std::string& instance, const std::string& address) {
  HostInfo h;
  h.set_name(name);
  h.set_address(address);
  h.set_instance_id(instance);
  h.set_version("0.1.0");
  h.set_protocol_version(kProtocolVersion);
  return h;
}

// Answers Identify from a script (UNAVAILABLE when empty) and records whom it was asked about.
class ScriptedIdentify {
 public:
  void Answer(absl::StatusOr<IdentifyResponse> answer) {
    absl::MutexLock lock(&mu_);
    script_.push_back(std::move(answer));
  }
  void AnswerAs(const HostInfo& host) {
    IdentifyResponse r;
    *r.mutable_host() = host;
    Answer(r);
  }
  std::vector<std::string> asked() {
    absl::MutexLock lock(&mu_);
    return asked_;
  }
  std::function<void(const std::string&, const IdentifyRequest&, Done<IdentifyResponse>)> Fn() {
    return [this](const std::string& address, const IdentifyRequest& request,
                  Done<IdentifyResponse> done) {
      absl::StatusOr<IdentifyResponse> answer = absl::UnavailableError("connection refused");
      {
        absl::MutexLock lock(&mu_);
        asked_.push_back(address + " for " + request.claimant().instance_id());
        if (!script_.empty()) {
          answer = std::move(script_.front());
          script_.pop_front();
        }
      }
      done(std::move(answer));
    };
  }

 private:
  absl::Mutex mu_;
  std::deque<absl::StatusOr<IdentifyResponse>> script_;
  std::vector<std::string> asked_;
};

class Fixture {
 public:
  Fixture() : loop_("test") {
    CoordinatorOptions options;
    options.heartbeat = absl::Milliseconds(50);
    options.host_timeout = absl::Seconds(60);
    options.identify = identify_.Fn();
    coordinator_ = std::make_unique<Coordinator>(loop_, "coord", options);
    loop_.Start();
    coordinator_->Start(Info("coord", "c1", "10.0.0.1:7070"));
  }
  ~Fixture() { loop_.Stop(); }

  absl::StatusOr<JoinResponse> Join(const HostInfo& host) {
    JoinRequest request;
    *request.mutable_host() = host;
    absl::Notification answered;
    absl::StatusOr<JoinResponse> got;
    coordinator_->HandleJoin(request, [&](absl::StatusOr<JoinResponse> r) {
      got = std::move(r);
      answered.Notify();
    });
    REQUIRE(answered.WaitForNotificationWithTimeout(absl::Seconds(10)));
    return got;
  }

  ScriptedIdentify identify_;

 private:
  EventLoop loop_;
  std::unique_ptr<Coordinator> coordinator_;
};

TEST_CASE("a live holder keeps its name; the newcomer is refused, naming both daemons") {
  Fixture f;
  const HostInfo b1 = Info("b", "b1", "10.0.0.2:7070");
  REQUIRE(f.Join(b1)->incarnation() == 1);
  CHECK(f.identify_.asked().empty());  // a free name: nobody to ask
  f.identify_.AnswerAs(b1);
  absl::StatusOr<JoinResponse> refused = f.Join(Info("b", "b2", "10.0.0.3:7070"));
  REQUIRE(refused.status().code() == absl::StatusCode::kAlreadyExists);
  CHECK(refused.status().message() ==
        "host name 'b' is held by the live member at 10.0.0.2:7070 (instance b1, pid 0); refused "
        "the daemon at 10.0.0.3:7070 (instance b2, pid 0): give each daemon its own host_name");
  CHECK(f.identify_.asked() == std::vector<std::string>{"10.0.0.2:7070 for b2"});
  // The holder is untouched: its retried Join keeps incarnation 1.
  CHECK(f.Join(b1)->incarnation() == 1);
}

TEST_CASE("a holder that does not answer, or a restart at its address, hands the name over") {
  Fixture f;
  REQUIRE(f.Join(Info("b", "b1", "10.0.0.2:7070"))->incarnation() == 1);
  // Crashed: nothing answers at 10.0.0.2 (script empty: UNAVAILABLE); the restart is elsewhere.
  const HostInfo b2 = Info("b", "b2", "10.0.0.9:7070");
  REQUIRE(f.Join(b2)->incarnation() == 2);
  // Restarted on the same address: the new process itself answers there.
  const HostInfo b3 = Info("b", "b3", "10.0.0.9:7070");
  f.identify_.AnswerAs(b3);
  REQUIRE(f.Join(b3)->incarnation() == 3);
  CHECK(f.identify_.asked() ==
        std::vector<std::string>{"10.0.0.2:7070 for b2", "10.0.0.9:7070 for b3"});
}

TEST_CASE("the coordinator's own name is refused without asking") {
  Fixture f;
  absl::StatusOr<JoinResponse> refused = f.Join(Info("coord", "x", "10.0.0.5:7070"));
  REQUIRE(refused.status().code() == absl::StatusCode::kAlreadyExists);
  CHECK(std::string(refused.status().message())
            .rfind("host name 'coord' is held by the live coordinator at 10.0.0.1:7070 (instance "
                   "c1, pid 0); refused the daemon at 10.0.0.5:7070 (instance x, pid 0)",
                   0) == 0);
  CHECK(f.identify_.asked().empty());
}

TEST_CASE("a daemon of another protocol version is refused, naming both versions") {
  Fixture f;
  HostInfo old = Info("b", "b1", "10.0.0.2:7070");
  old.set_protocol_version(0);  // a daemon from before the field
  absl::StatusOr<JoinResponse> refused = f.Join(old);
  REQUIRE(refused.status().code() == absl::StatusCode::kUnimplemented);
  CHECK(refused.status().message() ==
        absl::StrCat("the daemon at 10.0.0.2:7070 (host b, allreduced 0.1.0) speaks protocol "
                     "version 0, the coordinator coord (allreduced ",
                     kVersion, ") version ", kProtocolVersion,
                     ": run one allreduced release on every host"));
  HostInfo newer = Info("b", "b1", "10.0.0.2:7070");
  newer.set_protocol_version(kProtocolVersion + 1);
  CHECK(f.Join(newer).status().code() == absl::StatusCode::kUnimplemented);
  // Not a member: the same daemon at this version joins as the first holder of the name.
  absl::StatusOr<JoinResponse> joined = f.Join(Info("b", "b1", "10.0.0.2:7070"));
  REQUIRE(joined.ok());
  CHECK(joined->incarnation() == 1);
  CHECK(joined->protocol_version() == kProtocolVersion);
  CHECK(f.identify_.asked().empty());
}

}  // namespace
}  // namespace ard::cluster
