#pragma once

#include <string>

namespace pando::client {

// `pando-helper security launch --stdio`: asks the daemon for a session and
// relays this process's stdin/stdout/stderr to it byte for byte until the
// role exits. Returns the role's exit code (128+N for signal N) or one of the
// kExit* codes of connection.h.
int run_launch(const std::string& role, const std::string& project_root, const std::string& socket);

}  // namespace pando::client
