#include "daemon/sandbox/credentials.h"

#include <grp.h>
#include <linux/securebits.h>
#include <sys/capability.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <string>

#include "proto/error.h"

namespace pando::sandbox {
namespace {

using pando::helper::v1::ERROR_LAUNCH_FAILED;

[[noreturn]] void fail(const std::string& message) {
  throw Error(ERROR_LAUNCH_FAILED, "drop_to_role_user: " + message);
}

struct CapFree {
  void operator()(cap_t caps) const { cap_free(caps); }
};
using CapPtr = std::unique_ptr<std::remove_pointer_t<cap_t>, CapFree>;

// Root gets no capabilities back through uid 0 or setuid-root binaries, uid
// changes no longer touch the capability sets (so nothing is dropped or kept
// by accident: the sets are cleared explicitly below), keep-caps stays off, and
// ambient capabilities cannot be raised again. Every bit is locked so that not
// even a process that somehow regained CAP_SETPCAP could undo it.
constexpr unsigned long kSecurebits =
    SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP | SECBIT_NO_SETUID_FIXUP_LOCKED |
    SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;

void drop_groups(gid_t gid) {
  if (setgroups(0, nullptr) != 0) throw_errno("drop_to_role_user: setgroups(0)");
  const int count = getgroups(0, nullptr);
  if (count != 0) fail("supplementary groups still present after setgroups(0)");

  if (setresgid(gid, gid, gid) != 0) throw_errno("drop_to_role_user: setresgid");
  gid_t r, e, s;
  if (getresgid(&r, &e, &s) != 0) throw_errno("drop_to_role_user: getresgid");
  if (r != gid || e != gid || s != gid) fail("setresgid did not take effect");
}

void lock_securebits() {
  if (prctl(PR_SET_SECUREBITS, kSecurebits, 0, 0, 0) != 0) {
    throw_errno("drop_to_role_user: PR_SET_SECUREBITS");
  }
  const int bits = prctl(PR_GET_SECUREBITS, 0, 0, 0, 0);
  if (bits < 0) throw_errno("drop_to_role_user: PR_GET_SECUREBITS");
  if (static_cast<unsigned long>(bits) != kSecurebits) fail("securebits did not take effect");
}

void empty_bounding_set() {
  const cap_value_t max = cap_max_bits();
  for (cap_value_t cap = 0; cap < max; ++cap) {
    if (cap_drop_bound(cap) != 0) throw_errno("drop_to_role_user: cap_drop_bound");
  }
  for (cap_value_t cap = 0; cap < max; ++cap) {
    if (cap_get_bound(cap) != 0) fail("capability " + std::to_string(cap) + " still bounded");
  }
}

void clear_ambient_set() {
  if (cap_reset_ambient() != 0) throw_errno("drop_to_role_user: cap_reset_ambient");
  const cap_value_t max = cap_max_bits();
  for (cap_value_t cap = 0; cap < max; ++cap) {
    if (cap_get_ambient(cap) != 0) fail("capability " + std::to_string(cap) + " still ambient");
  }
}

void switch_uid(uid_t uid) {
  if (setresuid(uid, uid, uid) != 0) throw_errno("drop_to_role_user: setresuid");
  uid_t r, e, s;
  if (getresuid(&r, &e, &s) != 0) throw_errno("drop_to_role_user: getresuid");
  if (r != uid || e != uid || s != uid) fail("setresuid did not take effect");
}

void clear_capability_sets() {
  CapPtr empty(cap_init());
  if (!empty) throw_errno("drop_to_role_user: cap_init");
  if (cap_clear(empty.get()) != 0) throw_errno("drop_to_role_user: cap_clear");
  if (cap_set_proc(empty.get()) != 0) throw_errno("drop_to_role_user: cap_set_proc");

  CapPtr now(cap_get_proc());
  if (!now) throw_errno("drop_to_role_user: cap_get_proc");
  if (cap_compare(now.get(), empty.get()) != 0) fail("capabilities remain after cap_set_proc");
}

void set_no_new_privs() {
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    throw_errno("drop_to_role_user: PR_SET_NO_NEW_PRIVS");
  }
  if (prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1) fail("no_new_privs did not take effect");
}

}  // namespace

// Order matters:
// - Groups first: setgroups/setresgid need CAP_SETGID, still held.
// - Securebits while CAP_SETPCAP is held, and before setresuid: without
//   NO_SETUID_FIXUP the switch away from uid 0 would empty the permitted set,
//   and nothing could set or lock securebits afterwards. With it, setresuid
//   leaves every capability set as it is, so the sets are emptied explicitly
//   below and nothing relies on the kernel's implicit uid-change fixups.
// - Bounding and ambient sets (need CAP_SETPCAP) before the uid switch: a
//   failure there aborts a process that is still plainly root rather than a
//   half-switched one.
// - setresuid, then clear effective/permitted/inheritable and verify that the
//   process holds no capability at all.
// - no_new_privs last: nothing after it needs privilege, and Landlock and
//   seccomp, applied next by the launcher, require it.
void drop_to_role_user(const pando::helper::sandbox::v1::IdMapping& ids) {
  if (ids.role_uid() == 0 || ids.role_gid() == 0) fail("refusing to run a role as uid or gid 0");
  const auto uid = static_cast<uid_t>(ids.role_uid());
  const auto gid = static_cast<gid_t>(ids.role_gid());

  drop_groups(gid);
  lock_securebits();
  empty_bounding_set();
  clear_ambient_set();
  switch_uid(uid);
  clear_capability_sets();
  set_no_new_privs();
}

}  // namespace pando::sandbox
