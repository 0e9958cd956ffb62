#pragma once

#include "daemon/peer_identity.h"
#include "proto/sandbox.pb.h"

namespace pando::daemon {

class Daemon;

// Turns a launch plan into the selftest's: the program becomes the daemon's
// own probe (pando-helper-probe next to `sandbox_helper_path`, checked to be a
// root-owned regular file only root can write), with arguments the daemon
// chooses, and the probe's directory is bound read-only into the view like a
// runtime path. Everything else of the plan stays as the launch built it.
// Throws pando::Error (ERROR_SELFTEST_UNAVAILABLE) when the probe is unusable.
void make_selftest_plan(const Daemon& daemon, const PeerIdentity& peer,
                        pando::helper::sandbox::v1::SandboxPlan& plan);

}  // namespace pando::daemon
