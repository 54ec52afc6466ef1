// JSON text pieces the CLI writes by hand (bench --json rows, the timeline's Chrome trace), where
// the output is not a protobuf message. Pure functions: any thread.
#pragma once

#include <string>

namespace ard::ctl {

// `s` as a JSON string literal: quoted, with '"', '\\' and control characters escaped.
std::string JsonString(const std::string& s);

}  // namespace ard::ctl
