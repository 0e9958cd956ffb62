// pando-helper-probe: what the filesystem view holds, and what it does not.

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdlib>
#include <set>
#include <string>
#include <vector>

// The host file the view must not hold. A test build points it at a file the
// view does hold, to prove that a check can fail.
#ifndef PANDO_PROBE_SHADOW_PATH
#define PANDO_PROBE_SHADOW_PATH "/etc/shadow"
#endif

#include "daemon/sandbox/proc_masks.h"
#include "probe/probe.h"

namespace pando::probe {

namespace {

void expect_absent(const std::string& check, const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0) return fail(check, path + " exists");
  if (errno != ENOENT) return fail(check, path + ": " + errno_name(errno) + ", expected ENOENT");
  pass(check, path + " absent");
}

void check_host_secrets() {
  expect_absent("view.shadow", PANDO_PROBE_SHADOW_PATH);
  for (const char* path : {"/etc/gshadow", "/etc/sudoers", "/etc/ssh", "/etc/machine-id"}) {
    struct stat st {};
    if (lstat(path, &st) == 0) return fail("view.etc_secrets", std::string(path) + " exists");
  }
  pass("view.etc_secrets", "no gshadow, sudoers, ssh, machine-id in /etc");
}

void check_root_home() { expect_absent("view.root_home", "/root"); }

// The entries of `dir` that lead neither to the project nor to a runtime path.
std::vector<std::string> foreign_entries(const std::string& dir) {
  std::vector<std::string> allowed = options().runtime_paths;
  allowed.push_back(project_root());
  std::vector<std::string> foreign;
  for (const std::string& name : list_dir(dir)) {
    const std::string path = dir + "/" + name;
    bool leads = false;
    for (const std::string& target : allowed) {
      leads = leads || target == path || target.rfind(path + "/", 0) == 0;
    }
    if (!leads) foreign.push_back(path);
  }
  return foreign;
}

void check_homes() {
  const std::vector<std::string> others = foreign_entries("/home");
  if (!others.empty()) return fail("view.homes", "/home shows " + join(others));
  pass("view.homes", "no other user's home in /home");
}

void check_host_dirs() {
  std::vector<std::string> shown;
  for (const char* dir : {"/var", "/media", "/mnt", "/srv", "/boot", "/opt"}) {
    for (const std::string& path : foreign_entries(dir)) shown.push_back(path);
  }
  if (!shown.empty()) return fail("view.host_dirs", "the view shows " + join(shown));
  pass("view.host_dirs",
       "nothing of /var, /media, /mnt, /srv, /boot, /opt but the project and runtime paths");
}

void check_sys() { expect_absent("view.sys", "/sys"); }

void check_daemon_socket() {
  if (options().socket.empty()) return skip("view.daemon_socket", "the daemon named no socket");
  expect_absent("view.daemon_socket", options().socket);
  expect_absent("view.run", "/run");
}

// With hidepid=invisible in the session's own pid namespace, this process and
// its init are all there is.
void check_proc_pids() {
  std::vector<std::string> foreign;
  for (const std::string& name : list_dir("/proc")) {
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const long pid = std::strtol(name.c_str(), nullptr, 10);
    if (pid != 1 && pid != getpid()) foreign.push_back(name);
  }
  if (!foreign.empty()) return fail("view.proc_pids", "other processes visible: " + join(foreign));
  pass("view.proc_pids", "only this process and the session's init (pid 1) in /proc");
}

// Each host-wide /proc entry the launcher masks reads empty here, where the host has it (an
// entry the host lacks is absent from the session's procfs too). The role cannot open most of
// them unmasked (kcore is root's), so only an empty read passes.
void check_proc_masked() {
  std::vector<std::string> shown;
  for (const char* name : pando::sandbox::kProcMasked) {
    const std::string path = std::string("/proc/") + name;
    struct stat st {};
    if (lstat(path.c_str(), &st) != 0 && errno == ENOENT) continue;
    const bool empty = S_ISDIR(st.st_mode)
                           ? list_dir(path).empty()
                           : access(path.c_str(), R_OK) == 0 && read_file(path).empty();
    if (!empty) shown.push_back(path);
  }
  if (!shown.empty()) return fail("view.proc_masked", "not masked: " + join(shown));
  pass("view.proc_masked",
       "kernel memory, keys, timers, boot command line, memory map, "
       "interrupt and zone counters read empty in /proc");
}

void check_dev_nodes() {
  static const std::set<std::string> kExpected = {"null",  "zero",   "full",   "random", "urandom",
                                                  "tty",   "pts",    "ptmx",   "shm",    "fd",
                                                  "stdin", "stdout", "stderr", "core"};
  std::vector<std::string> unexpected;
  for (const std::string& name : list_dir("/dev")) {
    if (!kExpected.count(name)) unexpected.push_back(name);
  }
  if (!unexpected.empty()) return fail("view.dev", "unexpected in /dev: " + join(unexpected));
  pass("view.dev", "/dev holds only " + join(list_dir("/dev")));
}

void check_mknod() {
  const std::string path = home() + "/pando-selftest-null";
  expect_failure("view.mknod_device", mknod(path.c_str(), S_IFCHR | 0666, makedev(1, 3)));
  unlink(path.c_str());
}

void check_root_read_only() {
  expect_failure("view.root_read_only", try_create("/pando-selftest", 0644));
}

}  // namespace

void view_checks() {
  check_host_secrets();
  check_root_home();
  check_homes();
  check_host_dirs();
  check_sys();
  check_daemon_socket();
  check_proc_pids();
  check_proc_masked();
  check_dev_nodes();
  check_mknod();
  check_root_read_only();
}

}  // namespace pando::probe
