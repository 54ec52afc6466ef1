#include "daemon/common/process_alive.h"

#include <fstream>
#include <string>

namespace ard {

bool ProcessAlive(uint32_t pid) {
  if (pid == 0) return false;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return false;
  // "pid (comm) S ...": the state follows the last ')' (comm may hold spaces and parentheses).
  const size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return false;
  const char state = stat[close + 2];
  return state != 'Z' && state != 'X' && state != 'x';
}

}  // namespace ard
