#pragma once

#include <string>
#include <vector>

namespace pando::client {

struct SelftestOptions {
  std::vector<std::string> roles;  // run one after the other
  std::string project_root;        // empty: a temporary project made here and removed after
  bool json = false;
  std::string socket;
};

// `pando-helper security selftest`: lists the layers the daemon reports
// unavailable, then has the daemon run its probe as each role in a real
// session and prints one line per check. Returns 0 when no check failed, 1
// when one did, or a kExit* code of connection.h.
int run_selftest(const SelftestOptions& options);

}  // namespace pando::client
