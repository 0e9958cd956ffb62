#include "daemon/daemon.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "common/accounts.h"
#include "common/json_log.h"
#include "daemon/sandbox/landlock.h"
#include "daemon/sandbox/mounts.h"
#include "daemon/service_manager.h"
#include "daemon/session.h"
#include "proto/error.h"

namespace pando::daemon {

namespace asio = boost::asio;
namespace v1 = pando::helper::v1;
using Protocol = asio::local::stream_protocol;

namespace {

constexpr auto kShutdownGrace = std::chrono::seconds(5);
// A session that runs this long gets its replacement launcher while it runs;
// a shorter one when it ends (see Session::handle_sandbox_event).
constexpr auto kPrestartDelay = std::chrono::seconds(1);

// The socket's directory must be root's alone, or a local user could swap the
// socket for one of their own.
void ensure_socket_dir(const std::string& dir) {
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    throw_errno("mkdir " + dir, v1::ERROR_INTERNAL);
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0) throw_errno("stat " + dir, v1::ERROR_INTERNAL);
  if (!S_ISDIR(st.st_mode) || st.st_uid != 0 || (st.st_mode & 022) != 0) {
    throw Error(v1::ERROR_CONFIG_INVALID,
                dir + " must be a directory owned by root and writable only by root");
  }
}

// Every connection, passed fd and resolution costs an open file: the soft
// limit (often 1024) is raised to the hard one, which the service unit sets.
void raise_open_file_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    log::warn("nofile_limit_unknown", {{"error", std::string(std::strerror(errno))}});
    return;
  }
  const rlim_t before = limit.rlim_cur;
  if (before == limit.rlim_max) {
    log::info("nofile_limit", {{"limit", static_cast<uint64_t>(before)}});
    return;
  }
  limit.rlim_cur = limit.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &limit) != 0) {
    log::warn("nofile_limit_not_raised", {{"limit", static_cast<uint64_t>(before)},
                                          {"hard_limit", static_cast<uint64_t>(limit.rlim_max)},
                                          {"error", std::string(std::strerror(errno))}});
    return;
  }
  log::info("nofile_limit_raised", {{"from", static_cast<uint64_t>(before)},
                                    {"to", static_cast<uint64_t>(limit.rlim_max)}});
}

bool daemon_answers(const std::string& path) {
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  return connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
}

}  // namespace

Daemon::Daemon(DaemonConfig config, DaemonOptions options)
    : config_(std::move(config)),
      options_(std::move(options)),
      acceptor_(io_),
      signals_(io_, SIGTERM, SIGINT),
      shutdown_timer_(io_),
      idle_timer_(io_),
      cgroup_retry_timer_(io_),
      caller_sweep_timer_(io_),
      prestart_timer_(io_),
      prestart_later_timer_(io_) {}

Daemon::~Daemon() {
  if (owns_socket_file_) unlink(socket_path_.c_str());
}

const RoleConfig& Daemon::role_config(const std::string& role) const {
  return role == "core" ? config_.core() : config_.workspace();
}

// The programs the daemon runs, and the watch that keeps project indexes current.
void Daemon::open_helpers() {
  git_query_.emplace(config_.sandbox_helper_path(), config_.git_path());
  project_watch_.emplace();
  const std::string& path = config_.sandbox_helper_path();
  launcher_.reset(open(path.c_str(), O_PATH | O_CLOEXEC));
  if (!launcher_.valid()) throw_errno("sandbox helper " + path, v1::ERROR_CONFIG_INVALID);
  struct stat st {};
  if (fstat(launcher_.get(), &st) != 0) throw_errno("stat " + path, v1::ERROR_INTERNAL);
  if (!S_ISREG(st.st_mode) || st.st_uid != 0 || (st.st_mode & 022) != 0) {
    throw Error(v1::ERROR_CONFIG_INVALID,
                "sandbox helper " + path +
                    " must be a regular file owned by root and writable only by root");
  }
}

namespace {

// The directory of the daemon's socket path; throws when the path cannot name a socket.
std::string socket_dir_of(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos || slash == 0) {
    throw Error(v1::ERROR_INTERNAL, "socket path " + path + " must be inside a directory");
  }
  if (path.size() >= sizeof(sockaddr_un::sun_path)) {
    throw Error(v1::ERROR_INTERNAL, "socket path " + path + " is too long");
  }
  return path.substr(0, slash);
}

// What is at the socket path already is replaced only when it is a socket nobody answers on.
void check_replaceable(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return;
  if (!S_ISSOCK(st.st_mode)) {
    throw Error(v1::ERROR_INTERNAL, path + " exists and is not a socket; not replacing it");
  }
  if (daemon_answers(path)) {
    throw Error(v1::ERROR_INTERNAL, "another daemon already answers on " + path);
  }
  log::info("stale_socket_replaced", {{"path", path}});
}

// Root's group, or the configured socket_group.
gid_t socket_group_of(const DaemonConfig& config) {
  if (!config.has_socket_group() || config.socket_group().empty()) return 0;
  const std::optional<accounts::Group> found = accounts::group_by_name(config.socket_group());
  if (!found) {
    throw Error(v1::ERROR_INTERNAL, "socket_group " + config.socket_group() + " does not exist");
  }
  return found->gid;
}

// Undoes the temporary socket file after `what` failed, keeping what's errno.
[[noreturn]] void remove_and_fail(const std::string& temp, const std::string& what) {
  const int err = errno;
  unlink(temp.c_str());
  errno = err;
  throw_errno(what, v1::ERROR_INTERNAL);
}

}  // namespace

void Daemon::set_up_socket() {
  if (auto fd = take_socket_activation_fd()) {
    socket_activated_ = true;
    acceptor_.assign(Protocol(), *fd);
    socket_path_ = "(socket activation)";
    return;
  }
  socket_path_ = options_.socket_override.value_or(config_.socket_path());
  ensure_socket_dir(socket_dir_of(socket_path_));
  check_replaceable(socket_path_);
  const gid_t group = socket_group_of(config_);
  // Bind under a temporary name with the final mode and group, then rename()
  // over the final path: clients never see a socket with the wrong mode, and a
  // stale file is replaced atomically.
  const std::string temp = fmt::format("{}.{}.tmp", socket_path_, getpid());
  unlink(temp.c_str());
  Protocol::acceptor acceptor(io_);
  acceptor.open();
  const mode_t old_umask = umask(0777);
  boost::system::error_code ec;
  acceptor.bind(Protocol::endpoint(temp), ec);
  umask(old_umask);
  if (ec) throw Error(v1::ERROR_INTERNAL, "bind " + temp + ": " + ec.message());
  if (chown(temp.c_str(), 0, group) != 0 || chmod(temp.c_str(), config_.socket_mode()) != 0) {
    remove_and_fail(temp, "chmod/chown " + temp);
  }
  if (rename(temp.c_str(), socket_path_.c_str()) != 0) {
    remove_and_fail(temp, "rename onto " + socket_path_);
  }
  owns_socket_file_ = true;
  acceptor.listen(SOMAXCONN);
  acceptor_ = std::move(acceptor);
}

int Daemon::run() {
  signal(SIGPIPE, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  raise_open_file_limit();
  open_helpers();
  // The socket first: if another daemon answers on it, its sessions' cgroups
  // are live, not stale, and must not be touched.
  set_up_socket();
  cgroups_.emplace(CgroupManager::detect(config_.cgroups()));
  log::info("cgroups_detected",
            {{"mode", std::string(cgroups_->mode() == CgroupMode::kUnified  ? "v2"
                                  : cgroups_->mode() == CgroupMode::kLegacy ? "v1"
                                                                            : "none")},
             {"detail", cgroups_->detail()}});
  if (cgroups_->mode() != CgroupMode::kNone) {
    remove_stale_sessions();
  } else if (!config_.cgroups().allow_unlimited()) {
    log::error("cgroups_unavailable",
               {{"detail", cgroups_->detail()},
                {"effect", std::string_view("every launch will be refused")}});
  }
  signals_.async_wait([this](const boost::system::error_code& ec, int signo) {
    if (!ec) on_signal(signo);
  });
  log::info("listening", {{"socket", socket_path_},
                          {"version", std::string_view(PANDO_VERSION)},
                          {"landlock_abi", sandbox::landlock_abi_version()}});
  accept_next();
  arm_idle_timer();
  launcher_template_.emplace(launcher_.get());
  pool_.emplace(*launcher_template_, config_.prestarted_sandboxes());
  pool_->refill();
  arm_prestart_timer();
  notify("READY=1");
  // A handler that throws must not take every other session down with it:
  // log it and keep serving.
  for (;;) {
    try {
      io_.run();
      break;
    } catch (const std::exception& e) {
      log::error("handler_failed", {{"error", std::string(e.what())}});
    }
  }
  log::info("stopped");
  if (!off_loop_.empty()) {
    // A thread stuck in the kernel (on a caller's hung filesystem) can be
    // neither cancelled nor joined, and it still uses this object: nothing may
    // be destroyed under it, and exit-time work (a sanitizer's leak check
    // stops every thread) would wait for it. The launchers go first; the rest
    // ends with the process.
    log::warn("exit_with_threads_stuck", {{"threads", static_cast<uint64_t>(off_loop_.size())}});
    pool_.reset();
    launcher_template_.reset();
    _exit(0);
  }
  return 0;
}

void Daemon::accept_next() {
  acceptor_.async_accept([this](const boost::system::error_code& ec, Protocol::socket socket) {
    if (shutting_down_) return;
    if (ec) {
      log::warn("accept_failed", {{"error", ec.message()}});
      if (ec == asio::error::operation_aborted) return;
      return accept_next();
    }
    PeerIdentity peer;
    try {
      peer = read_peer_identity(socket.native_handle());
    } catch (const std::exception& e) {
      log::warn("peer_unknown", {{"error", std::string(e.what())}});
      return accept_next();
    }
    auto session = std::make_shared<Session>(*this, std::move(socket), peer, new_session_id());
    sessions_.insert(session);
    try {
      add_pending(peer.uid);
    } catch (const Error& refusal) {
      log::warn("connection_refused",
                {{"uid", static_cast<int64_t>(peer.uid)}, {"reason", std::string(refusal.what())}});
      session->reject(refusal.code(), refusal.what());
      return accept_next();
    }
    idle_timer_.cancel();
    session->start();
    accept_next();
  });
}

std::string Daemon::new_session_id() {
  uint8_t bytes[8];
  if (getrandom(bytes, sizeof(bytes), 0) != sizeof(bytes))
    throw_errno("getrandom", v1::ERROR_INTERNAL);
  std::string id;
  for (uint8_t b : bytes) id += fmt::format("{:02x}", b);
  return id;
}

void Daemon::reserve_session(uid_t uid) {
  if (live_sessions_ >= config_.max_sessions()) {
    throw Error(v1::ERROR_TOO_MANY_SESSIONS,
                fmt::format("the daemon already runs {} sessions (its limit)", live_sessions_));
  }
  if (sessions_per_uid_[uid] >= config_.max_sessions_per_uid()) {
    throw Error(
        v1::ERROR_TOO_MANY_SESSIONS_FOR_USER,
        fmt::format("you already run {} sessions (the per-user limit)", sessions_per_uid_[uid]));
  }
  ++live_sessions_;
  ++sessions_per_uid_[uid];
}

void Daemon::release_session(uid_t uid) {
  --live_sessions_;
  if (--sessions_per_uid_[uid] == 0) sessions_per_uid_.erase(uid);
}

void Daemon::add_pending(uid_t uid) {
  const auto it = pending_per_uid_.find(uid);
  const unsigned mine = it == pending_per_uid_.end() ? 0 : it->second;
  if (mine >= config_.max_pending_per_uid()) {
    throw Error(v1::ERROR_TOO_MANY_PENDING_FOR_USER,
                fmt::format("you already have {} requests pending (connections not yet answered "
                            "or project lookups still running), the per-user limit",
                            mine));
  }
  if (pending_ >= kMaxPending) {
    throw Error(v1::ERROR_TOO_MANY_SESSIONS,
                fmt::format("the daemon already has {} requests pending (its limit)", pending_));
  }
  ++pending_;
  ++pending_per_uid_[uid];
}

void Daemon::release_pending(uid_t uid) {
  --pending_;
  if (--pending_per_uid_[uid] == 0) pending_per_uid_.erase(uid);
}

void Daemon::run_off_loop(uid_t uid, std::function<void()> work, std::function<void()> done) {
  const uint64_t id = next_off_loop_id_++;
  off_loop_.emplace(id, OffLoop{uid, std::move(done)});
  // The thread starts with every signal blocked: SIGTERM and SIGINT are the
  // event loop's, and a thread asleep in the kernel would leave them pending.
  sigset_t all, saved;
  sigfillset(&all);
  if (const int err = pthread_sigmask(SIG_SETMASK, &all, &saved); err != 0) {
    off_loop_.erase(id);
    errno = err;
    throw_errno("pthread_sigmask", v1::ERROR_INTERNAL);
  }
  // Detached: a thread stuck in the kernel can never be joined (see run()).
  // Its completion is posted back; until it runs, `done` and the pending slot
  // stay here.
  try {
    std::thread([this, id, work = std::move(work)] {
      work();
      asio::post(io_, [this, id] { off_loop_finished(id); });
    }).detach();
  } catch (const std::system_error& e) {
    pthread_sigmask(SIG_SETMASK, &saved, nullptr);
    off_loop_.erase(id);
    throw Error(v1::ERROR_INTERNAL, std::string("cannot start a thread: ") + e.what());
  }
  pthread_sigmask(SIG_SETMASK, &saved, nullptr);
}

void Daemon::off_loop_finished(uint64_t id) {
  auto node = off_loop_.extract(id);
  release_pending(node.mapped().uid);
  node.mapped().done();
}

std::unique_ptr<SessionCgroup> Daemon::create_session_cgroup(const std::string& session_id,
                                                             uid_t caller, const RoleConfig& role) {
  if (cgroups_->mode() == CgroupMode::kNone) {
    if (!config_.cgroups().allow_unlimited()) {
      throw Error(v1::ERROR_CGROUP_UNAVAILABLE,
                  "no usable cgroup controller (" + cgroups_->detail() +
                      "); launches are refused unless the config allows running without limits");
    }
    log::warn("session_without_limits", {{"session", session_id}, {"detail", cgroups_->detail()}});
    return nullptr;
  }
  auto cgroup =
      cgroups_->create_session(session_id, caller, CgroupManager::limits_from_config(role.limits()),
                               CgroupManager::caller_limits_from_config(config_.caller_limits()));
  arm_caller_sweep();
  return cgroup;
}

void Daemon::arm_caller_sweep() {
  if (shutting_down_ || caller_sweep_timer_.expiry() > std::chrono::steady_clock::now()) return;
  caller_sweep_timer_.expires_after(CgroupManager::kCallerLinger);
  caller_sweep_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    if (cgroups_->remove_idle_callers(std::chrono::steady_clock::now(),
                                      CgroupManager::kCallerLinger)) {
      arm_caller_sweep();
    }
  });
}

StartedSandbox Daemon::take_sandbox() { return pool_->take(); }

void Daemon::schedule_prestart() {
  if (prestart_scheduled_ || pool_->size() == 0) return;
  prestart_scheduled_ = true;
  asio::post(io_, [this]() {
    prestart_scheduled_ = false;
    if (!shutting_down_) pool_->refill();
  });
}

void Daemon::schedule_prestart_later() {
  if (prestart_later_armed_ || pool_->size() == 0) return;
  prestart_later_armed_ = true;
  prestart_later_timer_.expires_after(kPrestartDelay);
  prestart_later_timer_.async_wait([this](const boost::system::error_code& ec) {
    prestart_later_armed_ = false;
    if (!ec && !shutting_down_) pool_->refill();
  });
}

void Daemon::arm_prestart_timer() {
  if (pool_->size() == 0) return;
  prestart_timer_.expires_after(SandboxPool::kMaxIdleAge / 2);
  prestart_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || shutting_down_) return;
    pool_->refill();
    arm_prestart_timer();
  });
}

UniqueFd Daemon::idmap_userns(uid_t caller_uid, gid_t caller_gid, uid_t role_uid, gid_t role_gid) {
  // Bounded: callers are few, but a full cache just starts over.
  constexpr size_t kMaxCached = 64;
  const std::array<uint32_t, 4> key{caller_uid, caller_gid, role_uid, role_gid};
  const std::lock_guard lock(idmap_mutex_);
  auto it = idmap_userns_.find(key);
  if (it == idmap_userns_.end()) {
    if (idmap_userns_.size() >= kMaxCached) idmap_userns_.clear();
    UniqueFd userns = sandbox::make_idmap_userns(caller_uid, caller_gid, role_uid, role_gid);
    it = idmap_userns_.emplace(key, std::move(userns)).first;
  }
  // Its own fd: the cache may start over while the caller still uses it.
  UniqueFd copy(fcntl(it->second.get(), F_DUPFD_CLOEXEC, 0));
  if (!copy.valid()) throw_errno("dup idmap userns", v1::ERROR_INTERNAL);
  return copy;
}

void Daemon::remove_stale_sessions() {
  auto stale = cgroups_->remove_stale_sessions(
      CgroupManager::caller_limits_from_config(config_.caller_limits()));
  for (const auto& name : stale.removed) log::warn("stale_session_removed", {{"cgroup", name}});
  for (auto& session : stale.busy) {
    log::warn("stale_session_busy",
              {{"cgroup", session->describe()},
               {"effect", std::string_view("killed; removed once its processes have exited")}});
    defer_cgroup_removal(std::move(session));
  }
  if (!stale.busy.empty()) arm_caller_sweep();  // for the callers the busy ones keep
}

void Daemon::defer_cgroup_removal(std::unique_ptr<SessionCgroup> cgroup) {
  deferred_cgroups_.push_back(std::move(cgroup));
  retry_deferred_cgroups();
}

void Daemon::retry_deferred_cgroups() {
  std::erase_if(deferred_cgroups_, [](const std::unique_ptr<SessionCgroup>& cgroup) {
    try {
      return cgroup->remove();
    } catch (const std::exception& e) {
      log::error("cgroup_remove_failed",
                 {{"cgroup", cgroup->describe()}, {"error", std::string(e.what())}});
      return true;
    }
  });
  if (deferred_cgroups_.empty()) return;
  cgroup_retry_timer_.expires_after(std::chrono::milliseconds(50));
  cgroup_retry_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) retry_deferred_cgroups();
  });
}

void Daemon::session_closed(Session* session) {
  for (auto it = sessions_.begin(); it != sessions_.end(); ++it) {
    if (it->get() == session) {
      // Destroy the session after its current handler returns.
      asio::post(io_, [keep = *it]() {});
      sessions_.erase(it);
      break;
    }
  }
  if (shutting_down_) return finish_if_drained();
  arm_idle_timer();
}

void Daemon::arm_idle_timer() {
  if (!socket_activated_ || config_.idle_exit_seconds() == 0 || !sessions_.empty()) return;
  idle_timer_.expires_after(std::chrono::seconds(config_.idle_exit_seconds()));
  idle_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || !sessions_.empty()) return;
    log::info("idle_exit", {{"idle_seconds", config_.idle_exit_seconds()}});
    begin_shutdown();
  });
}

void Daemon::on_signal(int signo) {
  log::info("signal_received", {{"signal", signo}});
  begin_shutdown();
}

void Daemon::begin_shutdown() {
  if (shutting_down_) return;
  shutting_down_ = true;
  try {
    notify("STOPPING=1");
  } catch (const std::exception& e) {
    log::warn("notify_failed", {{"error", std::string(e.what())}});
  }
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  if (owns_socket_file_) {
    unlink(socket_path_.c_str());
    owns_socket_file_ = false;
  }
  idle_timer_.cancel();
  caller_sweep_timer_.cancel();
  prestart_timer_.cancel();
  prestart_later_timer_.cancel();
  if (pool_) pool_->clear();
  signals_.cancel(ignored);
  const auto live = sessions_;
  for (const auto& session : live) session->shut_down();
  shutdown_timer_.expires_after(kShutdownGrace);
  shutdown_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    log::warn("shutdown_forced", {{"sessions_left", static_cast<uint64_t>(sessions_.size())}});
    io_.stop();
  });
  finish_if_drained();
}

void Daemon::finish_if_drained() {
  if (!sessions_.empty()) return;
  retry_deferred_cgroups();
  if (has_cgroups()) cgroups_->remove_idle_callers(std::chrono::steady_clock::now(), {});
  shutdown_timer_.cancel();
  cgroup_retry_timer_.cancel();
  io_.stop();
}

bool Daemon::has_cgroups() const { return cgroups_ && cgroups_->mode() != CgroupMode::kNone; }

bool Daemon::limits_session_pids() const { return cgroups_ && cgroups_->limits_pids(); }

const std::string& Daemon::client_socket_path() const {
  return socket_activated_ ? config_.socket_path() : socket_path_;
}

}  // namespace pando::daemon
