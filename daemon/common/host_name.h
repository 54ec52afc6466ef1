// Host names in the cluster: what the config accepts and what the coordinator admits.
#pragma once

#include <string>

namespace ard {

// 1-64 characters, each a letter, digit, '-', '_' or '.'.
inline bool ValidHostName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

}  // namespace ard
