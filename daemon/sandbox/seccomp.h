#pragma once

namespace pando::sandbox {

// Installs the seccomp filter (policy table in seccomp.cc, listed in
// SECURITY.md). Needs PR_SET_NO_NEW_PRIVS already set. Last step before exec.
// Throws SetupError.
void install_seccomp_filter();

}  // namespace pando::sandbox
