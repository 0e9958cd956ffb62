// pando-helper-probe: what every check shares (its options, how it reports,
// the ways an attempt is made), and the checks, one entry point per concern,
// in the order main runs them.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

namespace pando::probe {

struct Options {
  std::string role;
  uid_t caller_uid = 0;
  gid_t caller_gid = 0;
  std::string socket;
  bool cgroups = false;                    // the session has a cgroup of its own
  long pids_max = 0;                       // the session's pids.max; 0: none
  std::vector<std::string> runtime_paths;  // host paths the view holds besides the project
};

// Parses the daemon's arguments into options(); false for a bad command line.
bool parse_options(int argc, char** argv);
const Options& options();
bool workspace();
// The number of checks that failed so far.
int failures();

// One line each: `PASS <check> <detail>`, `FAIL ...` or `SKIP <check> <reason>`.
void pass(const std::string& check, const std::string& detail);
void fail(const std::string& check, const std::string& detail);
void skip(const std::string& check, const std::string& reason);

std::string errno_name(int err);
// A syscall that must fail with `expected`: PASS when it does, FAIL when it
// succeeded or failed otherwise.
void expect_errno(const std::string& check, long result, int expected);
// A call that must fail, with any error.
void expect_failure(const std::string& check, long result);
// Runs `body` in a forked child and returns its wait status: for calls that
// kill the caller or would change this process.
int in_child(const std::function<int()>& body);
// A call made in a forked child: returns the child's errno (255 for one that
// does not fit an exit status), 0 when the call succeeded, or -1 when the
// child died (its status in `status`).
int errno_in_child(const std::function<long()>& call, int& status);
void expect_errno_in_child(const std::string& check, const std::function<long()>& call,
                           int expected);
// A socket for `check`; when this host refuses the family (a service
// manager's RestrictAddressFamilies=), the check cannot run: SKIP, and -1.
int socket_for(const std::string& check, int family, int type);

// Creates `path` as a new file and removes it again: its fd (closed by then), or
// -1 with the open's errno.
int try_create(const std::string& path, mode_t mode);

std::string read_file(const std::string& path);
// A field of /proc/self/status ("" when it has none).
std::string status_field(const std::string& name);
std::vector<std::string> list_dir(const std::string& path);
// "a,b,c", or "(none)".
std::string join(const std::vector<std::string>& items);
std::string project_root();
std::string home();
// The kernel's Landlock ABI version; 0 without Landlock.
int landlock_abi();

void identity_checks();
void seccomp_checks();
void landlock_checks(int abi);
void view_checks();
void network_checks();
void environment_checks();
void cgroup_checks();
void project_checks(int abi);

}  // namespace pando::probe
