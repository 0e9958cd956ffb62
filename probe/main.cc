// pando-helper-probe: the escape attempts of `pando-helper security selftest`.
//
// The daemon runs it AS A ROLE, in a session built exactly as a launch builds
// it, with arguments only the daemon chooses. Each check tries one thing the
// sandbox must forbid (or reads one property it must have) and prints one line:
// `PASS <check> <detail>`, `FAIL <check> <detail>` or `SKIP <check> <reason>`.
// Exit 0 when nothing failed, 1 otherwise, 64 for a bad command line.
//
// Uses nothing but the C and C++ runtimes (linked in statically in the
// packages): it runs inside the view, which has /usr but none of the project's
// libraries.

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/keyctl.h>
#include <linux/landlock.h>
#include <linux/perf_event.h>
#include <linux/sched.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

// The host file the view must not hold. A test build points it at a file the
// view does hold, to prove that a check can fail.
#ifndef PANDO_PROBE_SHADOW_PATH
#define PANDO_PROBE_SHADOW_PATH "/etc/shadow"
#endif

extern char** environ;

namespace {

struct Options {
  std::string role;
  uid_t caller_uid = 0;
  gid_t caller_gid = 0;
  std::string socket;
  bool cgroups = false;                    // the session has a cgroup of its own
  long pids_max = 0;                       // the session's pids.max; 0: none
  std::vector<std::string> runtime_paths;  // host paths the view holds besides the project
};

Options g_options;
int g_failures = 0;

void report(const char* result, const std::string& check, const std::string& detail) {
  std::printf("%s %s %s\n", result, check.c_str(), detail.c_str());
  std::fflush(stdout);
}
void pass(const std::string& check, const std::string& detail) { report("PASS", check, detail); }
void fail(const std::string& check, const std::string& detail) {
  ++g_failures;
  report("FAIL", check, detail);
}
void skip(const std::string& check, const std::string& reason) { report("SKIP", check, reason); }

std::string errno_name(int err) { return strerrorname_np(err) ? strerrorname_np(err) : "?"; }

// A syscall that must fail with `expected`: PASS when it does, FAIL when it
// succeeded or failed otherwise.
void expect_errno(const std::string& check, long result, int expected) {
  const int err = errno;
  if (result >= 0) return fail(check, "succeeded (returned " + std::to_string(result) + ")");
  if (err != expected) {
    return fail(check, "failed with " + errno_name(err) + ", expected " + errno_name(expected));
  }
  pass(check, "refused with " + errno_name(err));
}

// A call that must fail, with any error.
void expect_failure(const std::string& check, long result) {
  const int err = errno;
  if (result >= 0) return fail(check, "succeeded");
  pass(check, "refused with " + errno_name(err));
}

// Runs `body` in a forked child and returns its wait status: for calls that
// kill the caller or would change this process.
int in_child(const std::function<int()>& body) {
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) _exit(body());
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

// A call made in a forked child: returns the child's errno (255 for one that
// does not fit an exit status), 0 when the call succeeded, or -1 when the
// child died (its status in `status`).
int errno_in_child(const std::function<long()>& call, int& status) {
  status = in_child([&call] {
    const long result = call();
    if (result >= 0) return 0;
    return errno > 0 && errno < 255 ? errno : 255;
  });
  if (status < 0 || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

void expect_errno_in_child(const std::string& check, const std::function<long()>& call,
                           int expected) {
  int status = 0;
  const int err = errno_in_child(call, status);
  if (err < 0) return fail(check, "the attempt died (wait status " + std::to_string(status) + ")");
  errno = err;
  expect_errno(check, err == 0 ? 0 : -1, expected);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string status_field(const std::string& name) {
  std::istringstream status(read_file("/proc/self/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(name + ":", 0) == 0) {
      const size_t start = line.find_first_not_of(" \t", name.size() + 1);
      return start == std::string::npos ? "" : line.substr(start);
    }
  }
  return "";
}

std::vector<std::string> list_dir(const std::string& path) {
  std::vector<std::string> names;
  DIR* dir = opendir(path.c_str());
  if (!dir) return names;
  while (const dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  closedir(dir);
  return names;
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ",") + item;
  return out.empty() ? "(none)" : out;
}

std::string project_root() {
  const char* root = std::getenv("PANDO_PROJECT_ROOT");
  return root ? root : "";
}

std::string home() {
  const char* dir = std::getenv("HOME");
  return dir ? dir : "";
}

int landlock_abi() {
  const long abi =
      syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  return abi < 0 ? 0 : static_cast<int>(abi);
}

bool workspace() { return g_options.role == "workspace"; }

// --- identity and capabilities ---------------------------------------------

void check_uid() {
  uid_t r, e, s;
  getresuid(&r, &e, &s);
  const std::string ids = std::to_string(r) + "/" + std::to_string(e) + "/" + std::to_string(s);
  if (r != e || e != s) return fail("identity.uid", "real/effective/saved differ: " + ids);
  if (r == 0 || r == g_options.caller_uid) {
    return fail("identity.uid", "runs as uid " + ids + " (root or the caller)");
  }
  pass("identity.uid", "uid " + ids + ", neither root nor the caller");
}

void check_gid() {
  gid_t r, e, s;
  getresgid(&r, &e, &s);
  const std::string ids = std::to_string(r) + "/" + std::to_string(e) + "/" + std::to_string(s);
  if (r != e || e != s) return fail("identity.gid", "real/effective/saved differ: " + ids);
  if (r == 0 || r == g_options.caller_gid) {
    return fail("identity.gid", "runs as gid " + ids + " (root or the caller's group)");
  }
  pass("identity.gid", "gid " + ids + ", neither root nor the caller's group");
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

// --- seccomp -----------------------------------------------------------------

void check_seccomp_mode() {
  const std::string mode = status_field("Seccomp");
  if (mode != "2") return fail("seccomp.mode", "Seccomp: " + (mode.empty() ? "unknown" : mode));
  pass("seccomp.mode", "a filter is installed (mode 2)");
}

// PTRACE_TRACEME succeeds for any untraced process without a filter; a child
// tries it, so that this process is never traced.
void check_ptrace() {
  expect_errno_in_child(
      "seccomp.ptrace", [] { return syscall(SYS_ptrace, PTRACE_TRACEME, 0, 0, 0); }, EPERM);
}

// Reading one's own memory is always allowed without a filter.
void check_process_vm_readv() {
  char source[8] = "pando";
  char target[8] = {};
  iovec local{target, sizeof(target)};
  iovec remote{source, sizeof(source)};
  expect_errno("seccomp.process_vm_readv",
               syscall(SYS_process_vm_readv, getpid(), &local, 1, &remote, 1, 0), EPERM);
}

// Attempts that would change this process when they succeed run in a child.
void check_mount() {
  expect_errno_in_child(
      "seccomp.mount", [] { return static_cast<long>(mount("none", "/tmp", "tmpfs", 0, nullptr)); },
      EPERM);
}

void check_new_mount_api() {
  expect_errno("seccomp.fsopen", syscall(SYS_fsopen, "tmpfs", 0), EPERM);
  expect_errno("seccomp.open_tree", syscall(SYS_open_tree, AT_FDCWD, "/tmp", 1 /* CLONE */), EPERM);
}

void check_chroot() {
  expect_errno_in_child(
      "seccomp.chroot", [] { return static_cast<long>(chroot("/tmp")); }, EPERM);
}

// An unprivileged user namespace is allowed on most kernels: only the filter
// refuses it here.
void check_unshare() {
  expect_errno_in_child(
      "seccomp.unshare_user", [] { return static_cast<long>(unshare(CLONE_NEWUSER)); }, EPERM);
}

void check_clone_namespace() {
  expect_errno_in_child(
      "seccomp.clone_newuser",
      [] {
        const long pid = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);
        if (pid == 0) _exit(0);
        if (pid > 0) waitpid(static_cast<pid_t>(pid), nullptr, 0);
        return pid;
      },
      EPERM);
}

void check_setns() {
  const int fd = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return skip("seccomp.setns", "/proc/self/ns/net: " + errno_name(errno));
  expect_errno_in_child(
      "seccomp.setns", [fd] { return static_cast<long>(setns(fd, 0)); }, EPERM);
  close(fd);
}

void check_clone3() {
  clone_args args{};
  args.exit_signal = SIGCHLD;
  expect_errno_in_child(
      "seccomp.clone3",
      [&args] {
        const long pid = syscall(SYS_clone3, &args, sizeof(args));
        if (pid == 0) _exit(0);
        if (pid > 0) waitpid(static_cast<pid_t>(pid), nullptr, 0);
        return pid;
      },
      ENOSYS);
}

void check_keyctl() {
  expect_errno("seccomp.keyctl",
               syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0), EPERM);
  expect_errno("seccomp.add_key",
               syscall(SYS_add_key, "user", "pando-selftest", "x", 1, KEY_SPEC_PROCESS_KEYRING),
               EPERM);
}

void check_bpf() { expect_errno("seccomp.bpf", syscall(SYS_bpf, 0, nullptr, 0), EPERM); }

void check_perf_event_open() {
  perf_event_attr attr{};
  attr.size = sizeof(attr);
  attr.type = PERF_TYPE_SOFTWARE;
  attr.config = PERF_COUNT_SW_CPU_CLOCK;
  attr.exclude_kernel = 1;
  expect_errno("seccomp.perf_event_open", syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0), EPERM);
}

void check_userfaultfd() {
  expect_errno("seccomp.userfaultfd", syscall(SYS_userfaultfd, O_CLOEXEC), EPERM);
}

void check_io_uring() {
  char params[120] = {};
  expect_errno("seccomp.io_uring_setup", syscall(SYS_io_uring_setup, 1, params), EPERM);
}

// Without the filter, TIOCSTI on a pipe is ENOTTY.
void check_tiocsti() {
  const char c = 'x';
  expect_errno("seccomp.tiocsti", ioctl(0, TIOCSTI, &c), EPERM);
}

void check_personality() {
  expect_errno_in_child(
      "seccomp.personality", [] { return static_cast<long>(personality(PER_LINUX32)); }, EPERM);
}

void check_init_module() {
  expect_errno("seccomp.init_module", syscall(SYS_init_module, nullptr, 0, ""), EPERM);
}

void check_open_by_handle() {
  expect_errno("seccomp.open_by_handle_at", syscall(SYS_open_by_handle_at, AT_FDCWD, nullptr, 0),
               EPERM);
}

void check_openat2() {
  char how[24] = {};
  expect_errno("seccomp.openat2", syscall(SYS_openat2, AT_FDCWD, "/", how, sizeof(how)), ENOSYS);
}

// Set-id modes on a file of the role's own (in HOME, which is in the project
// on disk): refused by the filter, whatever the mount flags.
void check_setid_chmod() {
  const std::string path = home() + "/pando-selftest-setid";
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
  if (fd < 0)
    return fail("seccomp.setuid_chmod", "cannot create " + path + ": " + errno_name(errno));
  close(fd);
  expect_errno("seccomp.setuid_chmod", chmod(path.c_str(), 04755), EPERM);
  expect_errno("seccomp.setgid_chmod", chmod(path.c_str(), 02755), EPERM);
  unlink(path.c_str());
  const std::string created = home() + "/pando-selftest-setid-create";
  const int made = open(created.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 04755);
  if (made >= 0) close(made);
  expect_errno("seccomp.setuid_create", made, EPERM);
  unlink(created.c_str());
}

// i386 syscalls kill the process. A kernel without the i386 entry faults on
// int 0x80 instead (SIGSEGV): nothing to test there.
void check_i386_abi() {
  const int status = in_child([] {
    long result = 20;  // __NR_getpid on i386
    asm volatile("int $0x80" : "+a"(result) : : "memory");
    return 0;
  });
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS) {
    return pass("seccomp.i386_abi", "int 0x80 killed the process (SIGSYS)");
  }
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV) {
    return skip("seccomp.i386_abi", "this kernel has no i386 syscall entry (int 0x80 faults)");
  }
  fail("seccomp.i386_abi",
       "int 0x80 did not kill the process (wait status " + std::to_string(status) + ")");
}

// x32 syscalls kill the process; a kernel without x32 answers ENOSYS.
void check_x32_abi() {
  constexpr long kX32Bit = 0x40000000;
  int status = 0;
  const int err = errno_in_child([] { return syscall(kX32Bit | SYS_getpid); }, status);
  if (err < 0 && WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS) {
    return pass("seccomp.x32_abi", "an x32 syscall killed the process (SIGSYS)");
  }
  if (err == ENOSYS) return skip("seccomp.x32_abi", "this kernel has no x32 ABI (ENOSYS)");
  fail("seccomp.x32_abi",
       "an x32 syscall did not kill the process (wait status " + std::to_string(status) + ")");
}

// --- Landlock ----------------------------------------------------------------

// /proc is mounted read-write, so only Landlock refuses writing there.
void check_landlock_write(int abi) {
  if (abi < 1) return skip("landlock.write_outside", "Landlock unavailable on this kernel");
  const int fd = open("/proc/self/comm", O_WRONLY | O_CLOEXEC);
  if (fd >= 0) close(fd);
  expect_errno("landlock.write_outside", fd, EACCES);
}

// A socket for `check`; when this host refuses the family (a service
// manager's RestrictAddressFamilies=), the check cannot run: SKIP.
int socket_for(const std::string& check, int family, int type) {
  const int fd = socket(family, type | SOCK_CLOEXEC, 0);
  if (fd < 0) skip(check, "cannot create the socket here: " + errno_name(errno));
  return fd;
}

void check_landlock_tcp(int abi) {
  if (abi < 4) {
    skip("landlock.tcp_bind", "Landlock ABI " + std::to_string(abi) + " < 4 has no TCP rules");
    return skip("landlock.tcp_connect",
                "Landlock ABI " + std::to_string(abi) + " < 4 has no TCP rules");
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(47811);
  if (const int fd = socket_for("landlock.tcp_bind", AF_INET, SOCK_STREAM); fd >= 0) {
    expect_errno("landlock.tcp_bind", bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)),
                 EACCES);
    close(fd);
  }
  // Without Landlock this is ECONNREFUSED (nothing listens on the session's own lo).
  if (const int fd = socket_for("landlock.tcp_connect", AF_INET, SOCK_STREAM); fd >= 0) {
    expect_errno("landlock.tcp_connect",
                 connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), EACCES);
    close(fd);
  }
}

// The session's init runs as the role user too: only Landlock's signal
// scope (ABI 6) keeps the role from signalling it.
void check_landlock_signal(int abi) {
  if (abi < 6) {
    return skip("landlock.signal_scope",
                "Landlock ABI " + std::to_string(abi) + " < 6 does not scope signals");
  }
  expect_errno("landlock.signal_scope", kill(1, 0), EPERM);
}

// --- filesystem view -----------------------------------------------------------

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
  std::vector<std::string> allowed = g_options.runtime_paths;
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
  if (g_options.socket.empty()) return skip("view.daemon_socket", "the daemon named no socket");
  expect_absent("view.daemon_socket", g_options.socket);
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
  const int fd = open("/pando-selftest", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd >= 0) {
    close(fd);
    unlink("/pando-selftest");
  }
  expect_failure("view.root_read_only", fd);
}

// --- network -----------------------------------------------------------------

void check_interfaces() {
  struct if_nameindex* names = if_nameindex();
  if (!names) return fail("net.interfaces", "if_nameindex: " + errno_name(errno));
  std::vector<std::string> found;
  for (struct if_nameindex* entry = names; entry->if_index != 0; ++entry)
    found.push_back(entry->if_name);
  if_freenameindex(names);
  if (found.size() != 1 || found[0] != "lo")
    return fail("net.interfaces", "interfaces: " + join(found));
  pass("net.interfaces", "only lo");
}

// A UDP connect sends nothing; it only needs a route.
void check_no_route() {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(53);
  inet_pton(AF_INET, "1.1.1.1", &addr.sin_addr);
  const int fd = socket_for("net.no_route_ipv4", AF_INET, SOCK_DGRAM);
  if (fd < 0) return;
  expect_errno("net.no_route_ipv4", connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)),
               ENETUNREACH);
  close(fd);
}

void check_no_route_ipv6() {
  const int fd = socket_for("net.no_route_ipv6", AF_INET6, SOCK_DGRAM);
  if (fd < 0) return;
  sockaddr_in6 addr{};
  addr.sin6_family = AF_INET6;
  addr.sin6_port = htons(53);
  inet_pton(AF_INET6, "2606:4700:4700::1111", &addr.sin6_addr);
  expect_errno("net.no_route_ipv6", connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)),
               ENETUNREACH);
  close(fd);
}

// The host's listening sockets (sshd, databases on 127.0.0.1) would be listed
// here in the host's network namespace.
void check_host_listeners() {
  std::vector<std::string> listening;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6", "/proc/net/unix"}) {
    std::istringstream lines(read_file(table));
    std::string line;
    std::getline(lines, line);  // header
    while (std::getline(lines, line)) {
      if (!line.empty()) listening.push_back(table);
    }
  }
  if (!listening.empty()) {
    return fail("net.host_sockets", std::to_string(listening.size()) + " sockets visible (" +
                                        listening.front() + "...)");
  }
  pass("net.host_sockets", "no TCP or Unix socket of the host visible (own network namespace)");
}

// --- environment ---------------------------------------------------------------

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
  const std::string expected_home = project_root() + "/.pando-sandbox/" + g_options.role + "/home";
  if (home() != expected_home) {
    return fail("env.exact", "HOME is " + home() + ", expected " + expected_home);
  }
  pass("env.exact", "only the daemon's variables (" + std::to_string(seen.size()) + ")");
}

// --- cgroups -----------------------------------------------------------------

// The view has no /sys, so the limits themselves cannot be read from inside;
// what shows is that the session is the root of its own cgroup namespace.
void check_cgroup_namespace() {
  if (!g_options.cgroups) {
    return skip("cgroup.session", "the daemon runs without usable cgroups on this host");
  }
  std::istringstream lines(read_file("/proc/self/cgroup"));
  std::string line;
  size_t count = 0;
  while (std::getline(lines, line)) {
    ++count;
    if (line.size() < 2 || line.substr(line.size() - 2) != ":/") {
      return fail("cgroup.session", "/proc/self/cgroup: " + line);
    }
  }
  if (count == 0) return fail("cgroup.session", "/proc/self/cgroup is empty");
  pass("cgroup.session", "the session cgroup is this process's cgroup namespace root");
}

// The limit is not readable from inside (no /sys in the view), so it is
// found the hard way: children that wait on a pipe are forked until fork()
// fails, which must happen before the session holds pids.max processes.
void check_pids_limit() {
  if (g_options.pids_max == 0) {
    return skip("cgroup.pids_max", g_options.cgroups
                                       ? "this host's cgroups have no pids controller"
                                       : "the daemon runs without usable cgroups on this host");
  }
  int hold[2];
  if (pipe2(hold, O_CLOEXEC) != 0) return fail("cgroup.pids_max", "pipe: " + errno_name(errno));
  std::vector<pid_t> children;
  int err = 0;
  while (static_cast<long>(children.size()) <= g_options.pids_max) {
    const pid_t pid = fork();
    if (pid == 0) {
      close(hold[1]);
      char byte;
      while (read(hold[0], &byte, 1) < 0 && errno == EINTR) {
      }
      _exit(0);
    }
    if (pid < 0) {
      err = errno;
      break;
    }
    children.push_back(pid);
  }
  close(hold[0]);
  close(hold[1]);
  for (const pid_t pid : children) {
    while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  // The session's init and this process count too.
  const std::string made = std::to_string(children.size()) + " more processes";
  if (err == 0) return fail("cgroup.pids_max", "fork never failed: " + made);
  if (err != EAGAIN) return fail("cgroup.pids_max", "fork failed with " + errno_name(err));
  if (static_cast<long>(children.size()) + 2 > g_options.pids_max) {
    return fail("cgroup.pids_max", made + " beyond pids.max " + std::to_string(g_options.pids_max));
  }
  pass("cgroup.pids_max", "fork refused (EAGAIN) after " + made + " (pids.max " +
                              std::to_string(g_options.pids_max) + ")");
}

// --- the project ---------------------------------------------------------------

void check_project_owner() {
  struct stat st {};
  if (stat(project_root().c_str(), &st) != 0) {
    return fail("project.idmapped", "stat " + project_root() + ": " + errno_name(errno));
  }
  if (st.st_uid != getuid()) {
    return fail("project.idmapped",
                "the project appears owned by uid " + std::to_string(st.st_uid));
  }
  pass("project.idmapped", "the caller's project appears owned by the role");
}

void check_project_write() {
  const std::string path = project_root() + "/pando-selftest-write";
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  const int err = errno;
  if (fd >= 0) {
    close(fd);
    unlink(path.c_str());
  }
  if (workspace()) {
    if (fd < 0)
      return fail("project.access", "workspace cannot write its project: " + errno_name(err));
    return pass("project.access", "workspace writes its project");
  }
  errno = err;
  expect_errno("project.access", fd, EROFS);
}

void check_hidden_env() {
  const std::string path = project_root() + "/.env";
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return skip("project.hidden_env", "the project has no .env");
  if (st.st_size != 0) return fail("project.hidden_env", path + " shows its content");
  pass("project.hidden_env", ".env is covered by an empty file");
}

// A project without git metadata gets an empty read-only .git: creating the
// file or directory there is refused just the same.
void check_git_config() {
  const std::string path = project_root() + "/.git/config";
  struct stat st {};
  const bool existed = lstat(path.c_str(), &st) == 0;
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd >= 0) {
    close(fd);
    if (!existed) unlink(path.c_str());
  }
  expect_errno("project.git_config", fd, EROFS);
}

void check_git_hooks() {
  const std::string hooks = project_root() + "/.git/hooks";
  struct stat st {};
  if (lstat(hooks.c_str(), &st) != 0) {
    const int result = mkdir(hooks.c_str(), 0755);
    if (result == 0) rmdir(hooks.c_str());
    return expect_errno("project.git_hooks", result, EROFS);
  }
  const std::string path = hooks + "/pando-selftest";
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0755);
  if (fd >= 0) {
    close(fd);
    unlink(path.c_str());
  }
  expect_errno("project.git_hooks", fd, EROFS);
}

void check_git_rename() {
  const std::string from = project_root() + "/.git";
  const std::string to = project_root() + "/pando-selftest-git";
  const int result = rename(from.c_str(), to.c_str());
  if (result == 0) rename(to.c_str(), from.c_str());
  expect_failure("project.git_rename", result);
}

// Only Landlock keeps FIFOs and sockets out of the project.
void check_project_fifo(int abi) {
  if (!workspace()) return skip("project.fifo", "core's project is read-only as a whole");
  if (abi < 1) return skip("project.fifo", "Landlock unavailable: FIFOs are not refused");
  const std::string path = project_root() + "/pando-selftest-fifo";
  const int result = mkfifo(path.c_str(), 0600);
  if (result == 0) unlink(path.c_str());
  expect_errno("project.fifo", result, EACCES);
}

void check_project_socket(int abi) {
  if (!workspace()) return skip("project.unix_socket", "core's project is read-only as a whole");
  if (abi < 1) return skip("project.unix_socket", "Landlock unavailable: sockets are not refused");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string path = project_root() + "/pando-selftest.sock";
  if (path.size() >= sizeof(addr.sun_path))
    return skip("project.unix_socket", "project path too long");
  std::strcpy(addr.sun_path, path.c_str());
  const int fd = socket_for("project.unix_socket", AF_UNIX, SOCK_STREAM);
  if (fd < 0) return;
  const int result = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  const int err = errno;
  close(fd);
  if (result == 0) unlink(path.c_str());
  errno = err;
  expect_errno("project.unix_socket", result, EACCES);
}

void check_other_role_home() {
  const std::string other = workspace() ? "core" : "workspace";
  const std::string dir = project_root() + "/.pando-sandbox/" + other;
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0) {
    return skip("project.other_role_home", dir + " does not exist yet");
  }
  const std::string path = dir + "/pando-selftest";
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd >= 0) {
    close(fd);
    unlink(path.c_str());
  }
  expect_errno("project.other_role_home", fd, EROFS);
}

bool parse_options(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string name = argv[i];
    const std::string value = argv[i + 1];
    if (name == "--role") {
      g_options.role = value;
    } else if (name == "--caller-uid") {
      g_options.caller_uid = static_cast<uid_t>(std::strtoul(value.c_str(), nullptr, 10));
    } else if (name == "--caller-gid") {
      g_options.caller_gid = static_cast<gid_t>(std::strtoul(value.c_str(), nullptr, 10));
    } else if (name == "--socket") {
      g_options.socket = value;
    } else if (name == "--cgroups") {
      g_options.cgroups = value == "yes";
    } else if (name == "--runtime-path") {
      g_options.runtime_paths.push_back(value);
    } else if (name == "--pids-max") {
      g_options.pids_max = std::strtol(value.c_str(), nullptr, 10);
    } else {
      return false;
    }
  }
  return argc % 2 == 1 && (g_options.role == "core" || g_options.role == "workspace") &&
         g_options.caller_uid != 0 && g_options.caller_gid != 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (!parse_options(argc, argv)) {
    std::fprintf(stderr,
                 "usage: pando-helper-probe --role core|workspace --caller-uid N --caller-gid N "
                 "[--socket PATH] [--cgroups yes|no] [--pids-max N] "
                 "[--runtime-path PATH]...\n"
                 "Run by pando-helperd for `pando-helper security selftest`.\n");
    return 64;
  }
  const int abi = landlock_abi();
  check_uid();
  check_gid();
  check_groups();
  check_capabilities();
  check_no_new_privs();
  check_setuid_root();
  check_seccomp_mode();
  check_ptrace();
  check_process_vm_readv();
  check_mount();
  check_new_mount_api();
  check_chroot();
  check_unshare();
  check_clone_namespace();
  check_setns();
  check_clone3();
  check_keyctl();
  check_bpf();
  check_perf_event_open();
  check_userfaultfd();
  check_io_uring();
  check_tiocsti();
  check_personality();
  check_init_module();
  check_open_by_handle();
  check_openat2();
  check_setid_chmod();
  check_i386_abi();
  check_x32_abi();
  check_landlock_write(abi);
  check_landlock_tcp(abi);
  check_landlock_signal(abi);
  check_host_secrets();
  check_root_home();
  check_homes();
  check_host_dirs();
  check_sys();
  check_daemon_socket();
  check_proc_pids();
  check_dev_nodes();
  check_mknod();
  check_root_read_only();
  check_interfaces();
  check_no_route();
  check_no_route_ipv6();
  check_host_listeners();
  check_environment();
  check_cgroup_namespace();
  check_pids_limit();
  check_project_owner();
  check_project_write();
  check_hidden_env();
  check_git_config();
  check_git_hooks();
  check_git_rename();
  check_project_fifo(abi);
  check_project_socket(abi);
  check_other_role_home();
  return g_failures == 0 ? 0 : 1;
}
