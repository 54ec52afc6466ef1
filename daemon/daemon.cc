#include "daemon/daemon.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "daemon/admin/admin_mutations.h"
#include "daemon/cluster/cluster_agent.h"
#include "daemon/cluster/coordinator.h"
#include "daemon/cluster/job_coordinator.h"
#include "daemon/cluster/loopback_negotiation.h"
#include "daemon/common/logging.h"
#include "daemon/common/make_dirs.h"
#include "daemon/common/status_macros.h"
#include "daemon/common/version.h"
#include "daemon/config/config_loader.h"
#include "daemon/daemon_options.h"
#include "daemon/dataplane/tcp/data_listener.h"
#include "daemon/dataplane/tcp/data_tls.h"
#include "daemon/elected_role.h"
#include "daemon/gpu/cuda_device.h"
#include "daemon/gpu/device_query.h"
#include "daemon/jobs/job_registry.h"
#include "daemon/local/local_socket_server.h"
#include "daemon/metrics/daemon_metrics.h"
#include "daemon/metrics/metrics_server.h"
#include "daemon/metrics/process_metrics.h"
#include "daemon/rpc/admin_socket.h"
#include "daemon/rpc/cluster_service.h"
#include "daemon/rpc/grpc_peer_client.h"
#include "daemon/rpc/grpc_server.h"
#include "daemon/rpc/negotiation_service.h"
#include "daemon/timeline/hub.h"
#include "daemon/timeline/timeline_admin.h"
#include "tls/credentials.h"

namespace ard {
namespace {

// Timeline: marks kept per job recording (~64 bytes each), and how long a recording that nobody
// stops lasts.
constexpr size_t kTimelineMarksPerJob = 1 << 18;
constexpr absl::Duration kTimelineMaxDuration = absl::Hours(1);

// The local admin socket (rpc/admin_socket.h): beside the clients' socket.
std::string AdminSocketPath(const DaemonConfig& config) { return config.local_socket() + ".admin"; }

std::string NewInstanceId() {
  absl::BitGen gen;
  return absl::StrFormat("%016x", absl::Uniform<uint64_t>(gen));
}

// `path` made absolute against the working directory, as launchers on other hosts need it.
std::string AbsolutePath(const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  char cwd[4096];
  return getcwd(cwd, sizeof(cwd)) != nullptr ? absl::StrCat(cwd, "/", path) : path;
}

// The address peers dial: the configured one, else the listen host with the bound port, with a
// wildcard listen host replaced by this machine's hostname.
std::string AdvertiseAddress(const DaemonConfig& config, int port) {
  if (!config.advertise_address().empty()) return config.advertise_address();
  std::string host;
  int unused;
  config::SplitHostPort(config.cluster_address(), &host, &unused).IgnoreError();
  if (host == "0.0.0.0" || host == "[::]" || host == "[0:0:0:0:0:0:0:0]") {
    char name[256] = {};
    gethostname(name, sizeof(name) - 1);
    host = name;
  }
  return absl::StrCat(host, ":", port);
}

}  // namespace

Daemon::Daemon(DaemonConfig config) : config_(std::move(config)) {}

Daemon::Daemon(DaemonConfig config, gpu::Device* gpu_device)
    : config_(std::move(config)), gpu_(gpu_device) {}

Daemon::~Daemon() { Shutdown(); }

absl::Status Daemon::Start() {
  ARD_CHECK(!started_);
  const tls::CredentialFiles tls_files{config_.tls_cert_file(), config_.tls_key_file(),
                                       config_.tls_ca_file()};
  ARD_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> server_credentials,
                       tls::MakeServerCredentials(tls_files));
  ARD_ASSIGN_OR_RETURN(channel_credentials_, tls::MakeChannelCredentials(tls_files));
  const std::string gpu_unavailable = DescribeSelf();
  if (!config_.metrics_address().empty()) {
    metrics_ = std::make_unique<metrics::DaemonMetrics>(
        config_.host_name(), absl::Seconds(config_.metrics_job_retention_s()));
  }
  loop_ = std::make_unique<EventLoop>("ard-control");
  timeline_ = std::make_unique<timeline::Hub>(kTimelineMarksPerJob, kTimelineMaxDuration);
  jobs_ = std::make_unique<jobs::JobRegistry>(
      *loop_, JobOptionsFrom(config_, self_,
                             JobServices{gpu_, gpu_unavailable, metrics_.get(), timeline_.get()}));
  if (!config_.coordination().empty()) {
    ARD_RETURN_IF_ERROR(BuildElected());
  } else if (is_coordinator()) {
    BuildCoordinator();
  } else {
    BuildFollower();
  }
  BuildServices();

  const absl::Status status = OpenEndpoints(std::move(server_credentials));
  started_ = true;
  if (!status.ok()) {
    Teardown();  // quietly: the caller prints the one error line
    return status;
  }
  jobs_->OnGpuLost([this](const absl::Status& status) {
    if (on_fatal_) on_fatal_(status);
  });
  jobs_->Start();
  if (coordinator_ != nullptr) coordinator_->Start(self_);
  if (agent_ != nullptr) agent_->Start(self_);
  if (elected_ != nullptr) elected_->Start(self_);

  const absl::Duration heartbeat = absl::Milliseconds(config_.heartbeat_ms());
  loop_->Post([this, heartbeat] { HealthOnLoop(heartbeat); });
  const absl::Duration watchdog = notifier_.WatchdogInterval();
  if (watchdog > absl::ZeroDuration()) {
    loop_->Post([this, watchdog] { WatchdogOnLoop(watchdog); });
  }
  Logger("daemon")->info(
      "allreduced serving version={} host={} address={} role={} local_socket={} gpus={} nccl={} "
      "pid={}",
      kVersion, self_.name(), self_.address(),
      elected_ != nullptr ? "elected" : (is_coordinator() ? "coordinator" : "follower"),
      config_.local_socket(), self_.gpus_size(),
      self_.nccl_version().empty() ? "none" : self_.nccl_version(), self_.pid());
  Logger("daemon")->info("gpu device={}", gpu_ != nullptr
                                              ? gpu_->Describe()
                                              : absl::StrCat("none (", gpu_unavailable, ")"));
  notifier_.Ready(absl::StrCat("serving on ", self_.address()));
  return absl::OkStatus();
}

std::string Daemon::DescribeSelf() {
  self_.set_name(config_.host_name());
  self_.set_version(kVersion);
  self_.set_protocol_version(kProtocolVersion);
  // handshake.h; data_tls.h with --data_plane_tls.
  self_.set_data_plane_security(config_.data_plane_tls() ? "encrypted" : "authenticated");
  self_.set_instance_id(NewInstanceId());
  self_.set_start_time_unix_ms(absl::ToUnixMillis(absl::Now()));
  self_.set_pid(getpid());
  self_.set_local_socket(AbsolutePath(config_.local_socket()));
  gpu::DescribeDevices(&self_);
  if (gpu_ == nullptr) {  // else injected by the caller (tests: the host-memory double)
    auto device = gpu::NewCudaDevice();
    if (!device.ok()) return std::string(device.status().message());
    gpu_device_ = std::move(*device);
    gpu_ = gpu_device_.get();
  }
  // Every GPU's context now, before the control loop runs: else the IPC opens of the first
  // GPU_REGISTER would create it on the loop, stalling every job for hundreds of ms per GPU.
  if (absl::Status contexts = gpu_->InitContexts(); !contexts.ok()) {
    gpu_ = nullptr;
    gpu_device_.reset();
    return absl::StrCat("GPU contexts: ", contexts.message());
  }
  return "";
}

std::vector<JobSummary> Daemon::LocalJobs() const {
  std::vector<JobSummary> jobs = jobs_->Summaries();
  for (JobSummary& ended : jobs_->EndedSummaries()) jobs.push_back(std::move(ended));
  return jobs;
}

void Daemon::BuildCoordinator() {
  cluster::JobCoordinatorOptions job_coordination =
      JobCoordinatorFrom(config_, absl::ToUnixSeconds(absl::Now()));
  job_coordination.is_up = [this](const std::string& host) { return coordinator_->IsUp(host); };
  job_coordinator_ = std::make_unique<cluster::JobCoordinator>(*loop_, job_coordination);
  cluster::CoordinatorOptions membership = CoordinatorFrom(config_);
  membership.local_jobs = [this] { return LocalJobs(); };
  membership.cluster_jobs = [this] { return job_coordinator_->Summaries(); };
  membership.on_host_down = [this](const std::string& host, const std::string& reason) {
    job_coordinator_->OnHostDown(host, reason);
  };
  membership.identify = [this](const std::string& address, const IdentifyRequest& request,
                               cluster::Done<IdentifyResponse> done) {
    IdentifyOnLoop(address, request, std::move(done));
  };
  coordinator_ = std::make_unique<cluster::Coordinator>(*loop_, config_.host_name(), membership);
}

void Daemon::BuildFollower() {
  peer_ = std::make_unique<rpc::GrpcPeerClient>(
      config_.coordinator(), absl::Milliseconds(config_.rpc_timeout_ms()), channel_credentials_);
  cluster::AgentOptions agent = AgentFrom(config_);
  agent.local_jobs = [this] { return LocalJobs(); };
  agent.on_cut_off = [this](const absl::Status& status) { jobs_->FailCrossHostJobs(status); };
  agent.on_refused = [this](const absl::Status& status) {
    if (on_fatal_) on_fatal_(status);
  };
  agent_ = std::make_unique<cluster::ClusterAgent>(*loop_, *peer_, config_.host_name(), agent);
}

absl::Status Daemon::BuildElected() {
  ElectedRoleServices services;
  services.loop = loop_.get();
  services.jobs = jobs_.get();
  services.peer_credentials = channel_credentials_;
  const tls::CredentialFiles etcd_tls{config_.coordination_tls_cert_file(),
                                      config_.coordination_tls_key_file(),
                                      config_.coordination_tls_ca_file()};
  ARD_ASSIGN_OR_RETURN(services.etcd_credentials, tls::MakeChannelCredentials(etcd_tls));
  services.identify = [this](const std::string& address, const IdentifyRequest& request,
                             cluster::Done<IdentifyResponse> done) {
    IdentifyOnLoop(address, request, std::move(done));
  };
  services.on_fatal = [this](const absl::Status& status) {
    if (on_fatal_) on_fatal_(status);
  };
  elected_ = std::make_unique<ElectedRole>(config_, std::move(services));
  return absl::OkStatus();
}

// The gRPC services over the role (coordinator, follower or elected) built before them.
void Daemon::BuildServices() {
  cluster::ClusterHandler* cluster_handler = coordinator_.get();
  cluster::AdminHandler* admin_handler = coordinator_.get();
  if (agent_ != nullptr) {
    cluster_handler = agent_.get();
    admin_handler = agent_.get();
  }
  if (elected_ != nullptr) {
    cluster_handler = elected_.get();
    admin_handler = elected_.get();
  }
  cluster_service_ = std::make_unique<rpc::ClusterService>(*cluster_handler);
  timeline_admin_ = std::make_unique<timeline::TimelineAdmin>(
      *loop_, *timeline_, config_.host_name(), [this]() -> const timeline::ClockOffset* {
        return agent_ != nullptr ? &agent_->clock_offset() : nullptr;
      });
  admin_mutations_ = std::make_unique<admin::AdminMutations>(
      *loop_, config_.host_name(), coordinator_.get(),
      elected_ != nullptr ? "the elected coordinator" : config_.coordinator(), *jobs_);
  admin_socket_ = std::make_unique<rpc::AdminSocket>();
  admin_service_ = std::make_unique<rpc::AdminService>(*admin_handler, *timeline_admin_,
                                                       *admin_mutations_, admin_socket_.get());
  if (elected_ != nullptr) {
    negotiation_service_ = std::make_unique<rpc::NegotiationService>(
        *loop_, [this](bool forming) { return elected_->JobCoordinatorOnLoop(forming); });
  } else {
    negotiation_service_ = std::make_unique<rpc::NegotiationService>(*loop_, job_coordinator_.get(),
                                                                     config_.coordinator());
  }
}

// The local socket, the control loop, the gRPC port and admin socket, the data plane, the
// metrics endpoint and the port file; on error the caller tears down what was opened.
absl::Status Daemon::OpenEndpoints(std::shared_ptr<grpc::ServerCredentials> server_credentials) {
  local_ = std::make_unique<local::LocalSocketServer>(*loop_, LocalSocketFrom(config_), *jobs_);
  ARD_RETURN_IF_ERROR(local_->Start());  // before the loop runs: it registers fds
  loop_->Start();
  server_ = std::make_unique<rpc::GrpcServer>();
  ARD_ASSIGN_OR_RETURN(port_, server_->Start(config_.cluster_address(),
                                             {cluster_service_.get(), admin_service_.get(),
                                              negotiation_service_.get()},
                                             std::move(server_credentials)));
  ARD_RETURN_IF_ERROR(admin_socket_->Start(AdminSocketPath(config_), server_->server()));
  self_.set_address(AdvertiseAddress(config_, port_));
  ARD_RETURN_IF_ERROR(StartDataPlane());
  ARD_RETURN_IF_ERROR(StartMetrics());
  return WritePortFile();
}

absl::Status Daemon::StartDataPlane() {
  dataplane::tcp::DataListenerOptions options = DataListenerFrom(config_);
  if (config_.data_plane_tls()) {
    ARD_ASSIGN_OR_RETURN(
        options.tls, dataplane::tcp::DataTlsContext::Create(
                         {config_.tls_cert_file(), config_.tls_key_file(), config_.tls_ca_file()}));
    Logger("dataplane")
        ->info(
            "data plane tls on: TLS 1.3 with certificate {} (kernel TLS where this kernel "
            "offers it, else userspace; each mesh logs which)",
            config_.tls_cert_file());
  }
  data_listener_ = std::make_unique<dataplane::tcp::DataListener>(options);
  if (auto s = data_listener_->Start(); !s.ok()) {
    return absl::UnavailableError(
        absl::StrCat("data plane: cannot listen on ", options.address, ": ", s.message()));
  }
  // Peers dial the advertised host with the data port.
  std::string advertised_host;
  int unused;
  config::SplitHostPort(self_.address(), &advertised_host, &unused).IgnoreError();
  self_.set_data_address(absl::StrCat(advertised_host, ":", data_listener_->port()));
  if (elected_ != nullptr) {
    // The elected role's client follows the coordinator from term to term.
  } else if (is_coordinator()) {
    negotiation_client_ = std::make_unique<cluster::LoopbackNegotiation>(*job_coordinator_);
  } else {
    negotiation_client_ = std::make_unique<rpc::GrpcPeerClient>(
        config_.coordinator(), absl::Milliseconds(config_.rpc_timeout_ms()), channel_credentials_);
  }
  cluster::NegotiationClient* client =
      elected_ != nullptr ? &elected_->negotiation() : negotiation_client_.get();
  dataplane::tcp::DataListener* listener = data_listener_.get();
  const std::string data_address = self_.data_address();
  loop_->Post([this, client, listener, data_address] {
    jobs_->EnableCrossHost(client, listener, data_address);
  });
  return absl::OkStatus();
}

// A holder that is alive answers at once; half the RPC timeout leaves the newcomer's Join (which
// waits for this) time to get its answer within its own deadline.
void Daemon::IdentifyOnLoop(const std::string& address, const IdentifyRequest& request,
                            cluster::Done<IdentifyResponse> done) {
  std::unique_ptr<rpc::GrpcPeerClient>& client = identify_clients_[address];
  if (client == nullptr) {
    client = std::make_unique<rpc::GrpcPeerClient>(
        address, absl::Milliseconds(config_.rpc_timeout_ms()) / 2, channel_credentials_);
  }
  client->IdentifyAsync(request, std::move(done));
}

// The health service says SERVING while this daemon is a member: the coordinator once started, a
// follower while joined and in contact. Polled (at the heartbeat) rather than pushed by the roles.
void Daemon::HealthOnLoop(absl::Duration interval) {
  server_->SetServing(MemberOnLoop());
  loop_->PostAfter(interval, [this, interval] { HealthOnLoop(interval); });
}

absl::Status Daemon::StartMetrics() {
  if (metrics_ == nullptr) return absl::OkStatus();
  metrics::AddProcessMetrics(metrics_->registry());
  metrics_->registry().AddCollector([this] { CollectMetrics(); });
  metrics_server_ = std::make_unique<metrics::MetricsServer>(metrics_->registry());
  ARD_ASSIGN_OR_RETURN(metrics_port_, metrics_server_->Start(config_.metrics_address()));
  Logger("daemon")->info("metrics serving address={} port={}", config_.metrics_address(),
                         metrics_port_);
  return absl::OkStatus();
}

// Loop-owned state is read on the loop; a wedged loop costs a scrape 2 s and stale values, never
// a hang (the endpoint stops before the loop does).
void Daemon::CollectMetrics() {
  auto done = std::make_shared<absl::Notification>();
  loop_->Post([this, done] {
    metrics_->SetLocalJobs(jobs_->Summaries());
    metrics_->SetClientConnections(local_->session_count());
    metrics_->SetJoined(MemberOnLoop());
    done->Notify();
  });
  const std::shared_ptr<dataplane::tcp::DataTraffic>& traffic = data_listener_->traffic();
  metrics_->SetDataPlaneBytes(traffic->sent_bytes.load(), traffic->received_bytes.load());
  for (int r = 0; r < dataplane::tcp::kRejectReasons; ++r) {
    const auto reason = static_cast<dataplane::tcp::RejectReason>(r);
    metrics_->SetDataPlaneRejected(dataplane::tcp::RejectReasonName(reason),
                                   data_listener_->rejected(reason));
  }
  if (coordinator_ != nullptr) {
    auto view_done = std::make_shared<absl::Notification>();
    coordinator_->HandleGetClusterStatus(
        {}, [this, view_done](absl::StatusOr<GetClusterStatusResponse> r) {
          if (r.ok()) metrics_->SetCluster(r->view());
          view_done->Notify();
        });
    view_done->WaitForNotificationWithTimeout(absl::Seconds(2));
  }
  done->WaitForNotificationWithTimeout(absl::Seconds(2));
}

bool Daemon::MemberOnLoop() const {
  if (elected_ != nullptr) return elected_->MemberOnLoop();
  return coordinator_ != nullptr || (agent_ != nullptr && agent_->MemberOnLoop());
}

// Pings from the control loop, so a wedged loop stops the pings and systemd restarts us.
void Daemon::WatchdogOnLoop(absl::Duration interval) {
  notifier_.Watchdog();
  loop_->PostAfter(interval, [this, interval] { WatchdogOnLoop(interval); });
}

absl::Status Daemon::WritePortFile() const {
  const std::string& path = config_.port_file();
  if (path.empty()) return absl::OkStatus();
  auto failed = [&path](const std::string& why) {
    return absl::FailedPreconditionError(absl::StrCat("cannot write port_file ", path, ": ", why));
  };
  // Its directory is created like the local socket's (mkdir -p, 0755).
  if (absl::Status dir = MakeDirs(Dirname(path)); !dir.ok()) {
    return failed(std::string(dir.message()));
  }
  // Write then rename, so a reader never sees a partial file.
  const std::string temp = absl::StrCat(path, ".tmp.", getpid());
  FILE* f = std::fopen(temp.c_str(), "w");
  if (f == nullptr) return failed(std::strerror(errno));
  std::fprintf(f, "%d\n", port_);
  if (std::fclose(f) != 0 || std::rename(temp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(temp.c_str());
    return failed(why);
  }
  return absl::OkStatus();
}

void Daemon::Shutdown() {
  if (!started_) return;
  started_ = false;
  notifier_.Stopping();
  Logger("daemon")->info("shutting down host={}", self_.name());
  // Fail this host's jobs while the cluster can still be told (their other hosts learn at once),
  // after unblocking data-plane connects waiting for peers.
  if (data_listener_ != nullptr) data_listener_->Stop();
  absl::Notification jobs_done;
  loop_->Post([this, &jobs_done] {
    // Event streams the server cancels on its way down are not hosts that stopped watching.
    if (job_coordinator_ != nullptr) job_coordinator_->Stop();
    jobs_->Shutdown();
    jobs_done.Notify();
  });
  jobs_done.WaitForNotificationWithTimeout(absl::Seconds(10));
  if (elected_ != nullptr) elected_->Shutdown();
  if (agent_ != nullptr) {
    absl::Notification left;
    agent_->LeaveAsync([&left] { left.Notify(); });
    // The Leave call has its own deadline; this bound only guards against a wedged loop.
    left.WaitForNotificationWithTimeout(absl::Milliseconds(config_.rpc_timeout_ms()) +
                                        absl::Seconds(1));
  }
  Teardown();
  Logger("daemon")->info("stopped host={}", self_.name());
}

void Daemon::Teardown() {
  started_ = false;
  if (metrics_server_ != nullptr) metrics_server_->Stop();  // scrapes read the components below
  if (data_listener_ != nullptr) data_listener_->Stop();
  if (admin_socket_ != nullptr) admin_socket_->Stop();  // hands fds to the server: stops first
  if (server_ != nullptr) server_->Shutdown(absl::Milliseconds(500));
  if (loop_ != nullptr) loop_->Stop();  // drops pending tasks; nothing touches the roles after this
  // The loop has stopped: what it owned is now touched only from this thread.
  if (jobs_ != nullptr) jobs_->EnableCrossHost(nullptr, nullptr, "");
  if (local_ != nullptr) local_->Stop();    // closes every client (their jobs fail)
  if (jobs_ != nullptr) jobs_->Shutdown();  // joins the executors
  negotiation_client_.reset();              // waits for calls in flight (their posts are dropped)
  identify_clients_.clear();
  peer_.reset();
  metrics_server_.reset();
  server_.reset();
  local_.reset();
  admin_service_.reset();
  admin_socket_.reset();
  admin_mutations_.reset();
  timeline_admin_.reset();
  cluster_service_.reset();
  agent_.reset();
  elected_.reset();  // stops the elector first; its terms drain their calls
  coordinator_.reset();
  negotiation_service_.reset();
  job_coordinator_.reset();
  jobs_.reset();
  timeline_.reset();
  data_listener_.reset();
  loop_.reset();
  metrics_.reset();
}

}  // namespace ard
