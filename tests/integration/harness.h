#pragma once

// Integration harness: the real pando-helperd on a temp socket with a temp
// config, the real client run as an unprivileged test user, raw-socket clients,
// and the test users themselves (pandotest-<pid>-<role>, created once per test
// binary, removed at its end; see harness.cc for the names).

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "proto/framing.h"
#include "proto/helper.pb.h"
#include "tests/integration/frame_decoder.h"

namespace pando::itest {

struct TestUser {
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;
};

// The users every integration test may use. Created by the gtest environment
// registered in harness.cc.
const TestUser& caller();      // unprivileged, owns the test projects
const TestUser& other_user();  // a second unprivileged user
const TestUser& core_user();   // role user for core
const TestUser& workspace_user();

// A root-owned 0755 temp dir, removed with everything in it by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  // Makes <path>/<name> owned by `owner`, mode 0755 (or `mode`).
  std::string make_dir(const std::string& name, const TestUser& owner, mode_t mode = 0755) const;
  std::string write_file(const std::string& name, const std::string& content, const TestUser& owner,
                         mode_t mode = 0644) const;

 private:
  std::string path_;
};

// Role command used by default: reads ONE line from stdin (byte by byte, so
// nothing after it is consumed) and evaluates it with sh. A test sends e.g.
// "exec cat\n" followed by the bytes for cat.
inline constexpr const char* kDispatchScript = "IFS= read -r cmd && eval \"$cmd\"";
// The config lines of a role that runs kDispatchScript with /bin/sh: the default argv of
// every harness daemon's roles, for DaemonOptions::*_argv_text with more fields after it.
inline constexpr const char* kDispatchArgv =
    "  argv: \"/bin/sh\"\n  argv: \"-c\"\n  argv: \"IFS= read -r cmd && eval \\\"$cmd\\\"\"\n";
// A shell function for one-line checks: "t NAME CMD..." prints "NAME yes" when CMD succeeds
// and "NAME no" when it fails, with CMD's own output discarded.
inline constexpr const char* kCheck =
    "t() { n=$1; shift; if \"$@\" >/dev/null 2>&1; then echo \"$n yes\"; else echo \"$n no\"; fi; "
    "}; ";

struct DaemonOptions {
  std::string extra_config;         // appended text-format fields
  std::string core_argv_text;       // replaces the default argv lines of core
  std::string workspace_argv_text;  // ... of workspace
  unsigned handshake_timeout_ms = 2000;
  unsigned max_sessions = 200;
  unsigned max_sessions_per_uid = 200;
  // Above the daemon's default of 8: tests start many sessions of one user at once.
  unsigned max_pending_per_uid = 64;
  std::string socket_path;             // empty: <temp dir>/run/helper.sock
  bool expect_start = true;            // false: the daemon is expected to exit at start
  std::vector<int> drop_capabilities;  // removed from the daemon's bounding set
  // System calls that fail with ENOSYS in the daemon and its children, as a service manager's
  // seccomp filter makes them (systemd's RestrictSUIDSGID= does it to openat2).
  std::vector<int> enosys_syscalls;
  // System calls that fail with EPERM likewise, as systemd-nspawn's and Docker's filters answer
  // the calls they do not allow.
  std::vector<int> eperm_syscalls;
  // Runs the daemon in a mount namespace of its own whose mounts are all shared, as on a host
  // with systemd as PID 1 (this CI host's are private): what a session mounts must not
  // propagate into it.
  bool shared_mounts = false;
  // A host without usable cgroups: the daemon runs in a mount namespace of its own without
  // /sys/fs/cgroup, with cgroups.allow_unlimited.
  bool without_cgroups = false;
  // The config's sandbox_helper_path; empty: the built pando-helper-sandbox (the built
  // pando-helper-probe is next to it).
  std::string sandbox_helper_path;
  // (file, target) pairs: the daemon runs in a mount namespace of its own in which each file
  // is bind-mounted over its target (another /etc/passwd, a getent that hangs).
  std::vector<std::pair<std::string, std::string>> files_over;
};

class Daemon {
 public:
  explicit Daemon(DaemonOptions options = {});
  ~Daemon();  // SIGTERM, wait; SIGKILL if it does not stop
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  const std::string& socket_path() const { return socket_; }
  pid_t pid() const { return pid_; }
  std::string log() const;  // the daemon's stderr (JSON lines) so far
  // The log once `count` of its lines contain `needle`, or as it stands after `timeout`.
  // For lines the daemon writes after it answered the client (session_ended comes after
  // the Exit frame): reading log() as soon as the client exits races the daemon.
  std::string log_with(const std::string& needle, size_t count = 1,
                       std::chrono::milliseconds timeout = std::chrono::seconds(10)) const;
  // Where test binaries (client, probe) are copied: visible inside sandboxes
  // as a read-only runtime path and reachable by the test users.
  const std::string& bin_dir() const { return bin_dir_; }
  std::string probe() const { return bin_dir_ + "/pando-sandbox-probe"; }
  std::string client() const { return bin_dir_ + "/pando-helper"; }
  const TempDir& dir() const { return dir_; }
  // Sends SIGTERM and waits; returns the exit status (as from waitpid).
  int stop(std::chrono::milliseconds timeout = std::chrono::seconds(20));
  // SIGKILL, reaped.
  void kill_hard();
  bool running() const;
  // Waits for the daemon to exit by itself; returns its wait status.
  int wait_exit(std::chrono::milliseconds timeout);

 private:
  TempDir dir_;
  std::string socket_;
  std::string bin_dir_;
  std::string log_path_;
  pid_t pid_ = -1;
};

struct RunResult {
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;
  std::string out;
  std::string err;
  bool timed_out = false;
};

struct RunOptions {
  std::string stdin_data;
  bool close_stdin_after = true;
  std::map<std::string, std::string> env;  // the whole environment of the client
  std::chrono::milliseconds timeout = std::chrono::seconds(60);
};

// Runs argv as `user` (setgroups/setgid/setuid) with pipes for stdio.
RunResult run_as(const TestUser& user, const std::vector<std::string>& argv,
                 RunOptions options = {});

// `pando-helper security launch --role R --project-root P --stdio --socket S` as `user`.
RunResult launch(const Daemon& daemon, const TestUser& user, const std::string& role,
                 const std::string& project, RunOptions options = {});

// Reads `fd` into `seen` until `needle` appears in it (true) or the timeout passes or the fd
// ends (false).
bool read_fd_until(int fd, std::string& seen, const std::string& needle,
                   std::chrono::milliseconds timeout);

// A client process started and left running, with pipes to its stdio.
class RunningClient {
 public:
  RunningClient(const TestUser& user, const std::vector<std::string>& argv,
                const std::map<std::string, std::string>& env = {});
  ~RunningClient();
  pid_t pid() const { return pid_; }
  int stdin_fd() const { return stdin_.get(); }
  int stdout_fd() const { return stdout_.get(); }
  int stderr_fd() const { return stderr_.get(); }
  void close_stdin() { stdin_.reset(); }
  bool write_all(const std::string& data);
  // Reads until `needle` appears in stdout or the timeout passes.
  bool read_until(const std::string& needle, std::chrono::milliseconds timeout);
  const std::string& out() const { return out_; }  // stdout read by read_until()
  const std::string& err() const { return err_; }  // stderr read by wait()
  // Waits for exit (SIGKILL after the timeout); returns the wait status.
  int wait(std::chrono::milliseconds timeout = std::chrono::seconds(30));

 private:
  pid_t pid_ = -1;
  UniqueFd stdin_, stdout_, stderr_;
  std::string out_;
  std::string err_;
  bool reaped_ = false;
};

// Raw protocol access, connected with the given user's credentials as the
// kernel will report them (SO_PEERCRED).
class RawClient {
 public:
  RawClient(const std::string& socket, const TestUser& as);
  int fd() const { return fd_.get(); }
  bool send_bytes(const std::string& bytes);
  bool send_preface();
  bool send_frame(pando::helper::v1::FrameType type, const std::string& payload);
  // The frame in one sendmsg() with `fds` attached (SCM_RIGHTS).
  bool send_frame_with_fds(pando::helper::v1::FrameType type, const std::string& payload,
                           const std::vector<int>& fds);
  std::string launch_request(pando::helper::v1::Role role, const std::string& root);
  // Next frame, or nullopt on EOF/timeout.
  std::optional<testing::FrameDecoder::Frame> read_frame(std::chrono::milliseconds timeout);
  // Reads frames until one of `type` arrives (data frames are skipped).
  std::optional<testing::FrameDecoder::Frame> read_until(uint8_t type,
                                                         std::chrono::milliseconds timeout);
  // True when the daemon closed the connection within the timeout.
  bool closed_by_peer(std::chrono::milliseconds timeout);

 private:
  UniqueFd fd_;
  testing::FrameDecoder decoder_;
};

// Reads the daemon's answer to `client` and checks that it is a Rejected frame with a one-line
// message, after which the daemon closes the connection (EXPECTs; an empty Rejected when no
// frame came).
pando::helper::v1::Rejected expect_rejected(RawClient& client, const Daemon& daemon);

// Waits until `pred` holds or the timeout passes.
bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout);

// The whole content of a file ("" when it cannot be read).
std::string read_file(const std::string& path);

// sha256 of data (via sha256sum, for test data only).
std::string sha256(const std::string& data);

// Pids of processes whose real uid is `uid`.
std::vector<pid_t> processes_of(uid_t uid);

// Number of open fds of a process.
size_t open_fd_count(pid_t pid);

// Lines of /proc/self/mountinfo.
std::vector<std::string> host_mounts();

// The built pando-helper-sandbox.
std::string sandbox_binary();

// Parses `<key> <value>` lines into a map.
std::map<std::string, std::string> parse_probe_lines(const std::string& text);

// "pandotest-i<pid of this test process>": the cgroup parent of every Daemon started here, so a
// second Daemon in the same test finds the first one's sessions.
std::string cgroup_parent_name();

// Session cgroup directories (<parent>/caller-*/session-*, and the older layout's
// <parent>/session-*), each listed once, wherever this process's daemons put them: <parent> is
// <hierarchy>/<cgroup_parent_name()> in every mounted hierarchy (v1: memory, pids, cpu, ...; v2:
// the unified one), and on cgroup v2 in a unit with Delegate=yes also <unit>/sessions.
std::vector<std::string> session_cgroup_dirs();

// Caller cgroup directories (<parent>/caller-*), likewise.
std::vector<std::string> caller_cgroup_dirs();

// VmRSS of a process in KiB, from /proc/<pid>/status; 0 when unreadable.
uint64_t rss_kib(pid_t pid);

}  // namespace pando::itest
