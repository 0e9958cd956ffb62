#pragma once

// The daemon: the listening socket, the registry of sessions and their limits,
// signals, and the daemon-wide state sessions consult.

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "common/asio.h"
#include "common/unique_fd.h"
#include "daemon/cgroups.h"
#include "daemon/config.h"
#include "daemon/git_query.h"
#include "daemon/launch.h"
#include "daemon/peer_identity.h"
#include "daemon/project_watch.h"
#include "daemon/sandbox_pool.h"
#include "proto/helper.pb.h"

namespace pando::daemon {

class Session;

struct DaemonOptions {
  std::string config_path;
  std::optional<std::string> socket_override;  // --socket
};

class Daemon {
 public:
  Daemon(DaemonConfig config, DaemonOptions options);
  ~Daemon();

  // Sets up the socket, cgroups and signals, then serves until SIGTERM/SIGINT.
  // Returns the process exit code. Throws pando::Error on a start-up failure.
  int run();

  boost::asio::io_context& io() { return io_; }
  // config() and role_config() never change after start: threads of
  // run_off_loop() may read them.
  const DaemonConfig& config() const { return config_; }
  const RoleConfig& role_config(const std::string& role) const;
  // A launcher for a session: pre-started when one waits, else started now.
  // Throws pando::Error.
  StartedSandbox take_sandbox();
  // Tops the prestarted launchers up once the current handler returns.
  void schedule_prestart();
  // The same, kPrestartDelay from now unless it happens sooner.
  void schedule_prestart_later();
  // The user namespace that idmaps caller -> role for mounts, made once per
  // id quadruple (no process lives in it); the caller gets its own fd to it.
  // Thread-safe (run_off_loop() threads use it). Throws pando::Error.
  UniqueFd idmap_userns(uid_t caller_uid, gid_t caller_gid, uid_t role_uid, gid_t role_gid);
  bool shutting_down() const { return shutting_down_; }

  // Session accounting: a launched session holds a reservation until it ends.
  // Throws pando::Error (ERROR_TOO_MANY_SESSIONS[_FOR_USER]) when a limit is reached.
  void reserve_session(uid_t uid);
  void release_session(uid_t uid);
  // Pending work of a uid: its connections not yet answered or launched, and
  // its run_off_loop() threads that have not returned. Refused beyond
  // max_pending_per_uid and, daemon-wide, beyond kMaxPending (which takes
  // several users to fill): throws pando::Error.
  void add_pending(uid_t uid);
  void release_pending(uid_t uid);
  // Runs `work` (which must not throw) on a thread of its own, then `done` on
  // the event loop: work that touches a caller's files, which may block in the
  // kernel for good (a hung FUSE or NFS mount). Takes over one pending slot of
  // `uid` (add_pending) and releases it when the thread returns, however long
  // after its connection ended. The thread holds nothing of the event loop's;
  // `done` stays here. Throws pando::Error (ERROR_INTERNAL) when no thread can be started.
  void run_off_loop(uid_t uid, std::function<void()> work, std::function<void()> done);
  // The project indexes (step 10). Thread-safe.
  ProjectWatch& project_watch() { return *project_watch_; }
  // Asks the caller's own git what it reads and runs (git_query.h). Thread-safe.
  GitQueryProgram& git_query() { return *git_query_; }
  // The sessions' compiled seccomp program, which pando-helper-git-query installs too.
  int seccomp_program_fd() const { return launcher_template_->seccomp_program_fd(); }
  // nullptr when cgroups are unusable and the config allows running without limits.
  std::unique_ptr<SessionCgroup> create_session_cgroup(const std::string& session_id, uid_t caller,
                                                       const RoleConfig& role);
  void defer_cgroup_removal(std::unique_ptr<SessionCgroup> cgroup);
  void session_closed(Session* session);
  // Every connection's session, launched or not.
  const std::set<std::shared_ptr<Session>>& sessions() const { return sessions_; }

  // The daemon's own layers; a project's idmap support is the session's to add.
  pando::helper::v1::Status status() const;
  // Set at start, never changed: safe from run_off_loop() threads.
  bool has_cgroups() const;
  bool limits_session_pids() const;
  const std::string& client_socket_path() const;

 private:
  void open_helpers();
  void set_up_socket();
  void accept_next();
  void on_signal(int signo);
  void begin_shutdown();
  void finish_if_drained();
  void arm_idle_timer();
  void arm_caller_sweep();
  void retry_deferred_cgroups();
  // At start: an earlier instance's session cgroups are killed and removed, or deferred.
  void remove_stale_sessions();
  void arm_prestart_timer();
  void off_loop_finished(uint64_t id);
  std::string new_session_id();

  DaemonConfig config_;
  DaemonOptions options_;
  boost::asio::io_context io_;
  boost::asio::local::stream_protocol::acceptor acceptor_;
  boost::asio::signal_set signals_;
  boost::asio::steady_timer shutdown_timer_;
  boost::asio::steady_timer idle_timer_;
  boost::asio::steady_timer cgroup_retry_timer_;
  boost::asio::steady_timer caller_sweep_timer_;  // CgroupManager::kCallerLinger
  std::string socket_path_;
  bool socket_activated_ = false;
  bool owns_socket_file_ = false;
  bool shutting_down_ = false;
  UniqueFd launcher_;
  std::optional<LauncherTemplate> launcher_template_;
  std::optional<GitQueryProgram> git_query_;
  std::optional<ProjectWatch> project_watch_;
  std::optional<SandboxPool> pool_;  // refers to launcher_template_
  boost::asio::steady_timer prestart_timer_;
  boost::asio::steady_timer prestart_later_timer_;
  bool prestart_scheduled_ = false;
  bool prestart_later_armed_ = false;
  std::mutex idmap_mutex_;
  std::map<std::array<uint32_t, 4>, UniqueFd> idmap_userns_;  // guarded by idmap_mutex_
  std::optional<CgroupManager> cgroups_;
  std::set<std::shared_ptr<Session>> sessions_;
  std::vector<std::unique_ptr<SessionCgroup>> deferred_cgroups_;
  unsigned live_sessions_ = 0;
  std::map<uid_t, unsigned> sessions_per_uid_;
  unsigned pending_ = 0;
  std::map<uid_t, unsigned> pending_per_uid_;
  struct OffLoop {
    uid_t uid;
    std::function<void()> done;
  };
  std::map<uint64_t, OffLoop> off_loop_;  // run_off_loop() threads not yet finished here
  uint64_t next_off_loop_id_ = 0;
};

}  // namespace pando::daemon
