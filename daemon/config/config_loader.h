// Loads the daemon's configuration: defaults, then the --config file (protobuf text format,
// proto/config.proto), then --<field>=<value> flags. Every field of DaemonConfig is a flag, found
// by reflection, so flags never drift from the schema. Pure functions; any thread.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/config.pb.h"

namespace ard::config {

// The compiled-in defaults (cluster_address 0.0.0.0:7070, local_socket
// /run/allreduced/allreduced.sock, heartbeat 1 s, host timeout 5 s, ...).
DaemonConfig Defaults();

// Parses argv (without argv[0]). Errors are InvalidArgument/NotFound with one line of text that
// names the flag, file and line at fault. `*help` is set (and no error returned) for --help.
absl::StatusOr<DaemonConfig> LoadConfig(const std::vector<std::string>& args, bool* help);

// Checks ranges and cross-field rules; fills in host_name from the machine when empty.
absl::Status ValidateAndComplete(DaemonConfig* config);

// Splits "HOST:PORT" / "[V6]:PORT". Port must be 0-65535.
absl::Status SplitHostPort(const std::string& address, std::string* host, int* port);

// Usage text listing every flag with its type and default.
std::string Usage();

}  // namespace ard::config
