// pando-helper-probe: who the process runs as, what it may do, and what it was given.

#include <errno.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <set>
#include <string>

#include "probe/probe.h"

extern char** environ;

namespace pando::probe {

namespace {

// The real, effective and saved ids are one, and neither root's nor the caller's.
void expect_own_ids(const std::string& check, const char* kind, const unsigned ids[3],
                    unsigned caller, const char* caller_name) {
  const std::string text =
      std::to_string(ids[0]) + "/" + std::to_string(ids[1]) + "/" + std::to_string(ids[2]);
  if (ids[0] != ids[1] || ids[1] != ids[2]) {
    return fail(check, "real/effective/saved differ: " + text);
  }
  if (ids[0] == 0 || ids[0] == caller) {
    return fail(check,
                std::string("runs as ") + kind + " " + text + " (root or " + caller_name + ")");
  }
  pass(check, std::string(kind) + " " + text + ", neither root nor " + caller_name);
}

void check_uid() {
  uid_t ids[3];
  getresuid(&ids[0], &ids[1], &ids[2]);
  expect_own_ids("identity.uid", "uid", ids, options().caller_uid, "the caller");
}

void check_gid() {
  gid_t ids[3];
  getresgid(&ids[0], &ids[1], &ids[2]);
  expect_own_ids("identity.gid", "gid", ids, options().caller_gid, "the caller's group");
}

void check_groups() {
  const int count = getgroups(0, nullptr);
  if (count != 0) return fail("identity.groups", std::to_string(count) + " supplementary groups");
  pass("identity.groups", "no supplementary groups");
}

void check_capabilities() {
  std::string held;
  for (const char* set : {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"}) {
    const std::string value = status_field(set);
    if (value.empty() || value.find_first_not_of('0') != std::string::npos) {
      held += std::string(set) + "=" + (value.empty() ? "unreadable" : value) + " ";
    }
  }
  if (!held.empty()) return fail("identity.capabilities", held);
  pass("identity.capabilities",
       "every set (inheritable, permitted, effective, bounding, ambient) empty");
}

void check_no_new_privs() {
  if (prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1) return fail("identity.no_new_privs", "not set");
  pass("identity.no_new_privs", "set");
}

void check_setuid_root() {
  expect_errno_in_child(
      "identity.setuid_root", [] { return static_cast<long>(setuid(0)); }, EPERM);
}

}  // namespace

void identity_checks() {
  check_uid();
  check_gid();
  check_groups();
  check_capabilities();
  check_no_new_privs();
  check_setuid_root();
}

namespace {

void check_environment() {
  static const std::set<std::string> kExpected = {"PATH",
                                                  "HOME",
                                                  "TMPDIR",
                                                  "XDG_CACHE_HOME",
                                                  "XDG_CONFIG_HOME",
                                                  "XDG_DATA_HOME",
                                                  "USER",
                                                  "LOGNAME",
                                                  "LANG",
                                                  "PANDO_PROCESS_ROLE",
                                                  "PANDO_PROJECT_ROOT",
                                                  "PANDO_AUTH_HOME_OVERRIDE"};
  std::vector<std::string> unexpected;
  std::set<std::string> seen;
  for (char** entry = environ; *entry; ++entry) {
    const std::string name = std::string(*entry).substr(0, std::string(*entry).find('='));
    seen.insert(name);
    if (!kExpected.count(name)) unexpected.push_back(name);
  }
  if (!unexpected.empty()) return fail("env.exact", "unexpected variables: " + join(unexpected));
  if (!seen.count("PATH")) return fail("env.exact", "PATH is not set");
  const std::string expected_home = project_root() + "/.pando-sandbox/" + options().role + "/home";
  if (home() != expected_home) {
    return fail("env.exact", "HOME is " + home() + ", expected " + expected_home);
  }
  pass("env.exact", "only the daemon's variables (" + std::to_string(seen.size()) + ")");
}

}  // namespace

void environment_checks() { check_environment(); }

}  // namespace pando::probe
