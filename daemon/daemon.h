#pragma once

// The daemon: the listening socket, the registry of sessions and their limits,
// signals, and the daemon-wide state sessions consult.

#include <sys/types.h>

#include <array>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "common/asio.h"
#include "common/unique_fd.h"
#include "daemon/cgroups.h"
#include "daemon/config.h"
#include "daemon/launch.h"
#include "daemon/peer_identity.h"
#include "daemon/sandbox_pool.h"
#include "proto/helper.pb.h"
#include "proto/request_validation.h"

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
  // Returns the process exit code. Throws std::runtime_error on a start-up failure.
  int run();

  boost::asio::io_context& io() { return io_; }
  const DaemonConfig& config() const { return config_; }
  const RoleConfig& role_config(const std::string& role) const;
  // A launcher for a session: pre-started when one waits, else started now.
  // Throws std::system_error.
  StartedSandbox take_sandbox();
  // Tops the prestarted launchers up once the current handler returns.
  void schedule_prestart();
  // The same, kPrestartDelay from now unless it happens sooner.
  void schedule_prestart_later();
  // The user namespace that idmaps caller -> role for mounts, made once per
  // id quadruple (no process lives in it). Throws sandbox::SetupError.
  int idmap_userns(uid_t caller_uid, gid_t caller_gid, uid_t role_uid, gid_t role_gid);
  bool shutting_down() const { return shutting_down_; }

  // Session accounting: a launched session holds a reservation until it ends.
  std::optional<wire::RequestError> reserve_session(uid_t uid);
  void release_session(uid_t uid);
  // nullptr when cgroups are unusable and the config allows running without limits.
  std::unique_ptr<SessionCgroup> create_session_cgroup(const std::string& session_id, uid_t caller,
                                                       const RoleConfig& role);
  void defer_cgroup_removal(std::unique_ptr<SessionCgroup> cgroup);
  void session_closed(Session* session);

  pando::helper::v1::Status status(const PeerIdentity& peer, const std::string& project_root);

 private:
  void open_launcher();
  void set_up_socket();
  void accept_next();
  void on_signal(int signo);
  void begin_shutdown();
  void finish_if_drained();
  void arm_idle_timer();
  void retry_deferred_cgroups();
  void arm_prestart_timer();
  std::string new_session_id();

  DaemonConfig config_;
  DaemonOptions options_;
  boost::asio::io_context io_;
  boost::asio::local::stream_protocol::acceptor acceptor_;
  boost::asio::signal_set signals_;
  boost::asio::steady_timer shutdown_timer_;
  boost::asio::steady_timer idle_timer_;
  boost::asio::steady_timer cgroup_retry_timer_;
  std::string socket_path_;
  bool socket_activated_ = false;
  bool owns_socket_file_ = false;
  bool shutting_down_ = false;
  UniqueFd launcher_;
  std::optional<LauncherTemplate> launcher_template_;
  std::optional<SandboxPool> pool_;  // refers to launcher_template_
  boost::asio::steady_timer prestart_timer_;
  boost::asio::steady_timer prestart_later_timer_;
  bool prestart_scheduled_ = false;
  bool prestart_later_armed_ = false;
  std::map<std::array<uint32_t, 4>, UniqueFd> idmap_userns_;
  std::optional<CgroupManager> cgroups_;
  std::set<std::shared_ptr<Session>> sessions_;
  std::vector<std::unique_ptr<SessionCgroup>> deferred_cgroups_;
  unsigned live_sessions_ = 0;
  std::map<uid_t, unsigned> sessions_per_uid_;
};

}  // namespace pando::daemon
