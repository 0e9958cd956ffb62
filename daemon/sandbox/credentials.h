#pragma once

#include "proto/sandbox.pb.h"

namespace pando::sandbox {

// Switches to the role user for good: no supplementary groups, setresgid,
// setresuid, each verified; every capability dropped from the effective,
// permitted, inheritable, ambient and bounding sets; securebits locked;
// PR_SET_NO_NEW_PRIVS. Throws Error.
void drop_to_role_user(const pando::helper::sandbox::v1::IdMapping& ids);

}  // namespace pando::sandbox
