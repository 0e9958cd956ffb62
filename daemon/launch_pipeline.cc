#include "daemon/launch_pipeline.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <termios.h>

#include <cerrno>
#include <cstring>

#include "daemon/daemon.h"
#include "daemon/plan.h"
#include "daemon/project_exits.h"
#include "daemon/project_root.h"
#include "daemon/sandbox/mount_api.h"
#include "daemon/selftest.h"
#include "proto/error.h"

namespace pando::daemon {

namespace v1 = pando::helper::v1;
namespace sbv1 = pando::helper::sandbox::v1;

namespace {

// Legacy BSD pseudo-terminal masters (/dev/pty*), which do not answer TIOCGPTN.
constexpr unsigned int kBsdPtyMasterMajor = 2;

[[noreturn]] void bad_fds(const std::string& why) { throw Error(v1::ERROR_BAD_STDIO_FDS, why); }

// What a file that is none of the three passable kinds is, for the refusal.
std::string kind_name(const struct stat& st) {
  switch (st.st_mode & S_IFMT) {
    case S_IFSOCK:
      return "a socket";
    case S_IFREG:
      return "a regular file";
    case S_IFDIR:
      return "a directory";
    case S_IFBLK:
      return "a block device";
    case S_IFCHR:
      return "a character device that is neither a terminal nor /dev/null";
    default:
      return "not a pipe, terminal or /dev/null";
  }
}

// A passed fd must give the role no more than the byte stream the relay would
// carry (SECURITY.md, "The trust boundary"), so only three kinds pass:
// - an anonymous pipe: a named FIFO is a file on a filesystem (reopened
//   through /proc/self/fd, with any mode the role may ask for);
// - a terminal that is not a pseudo-terminal master: whoever holds a master
//   types the slave's input (and TIOCGPTPEER opens a new slave); a UNIX98
//   master answers TIOCGPTN, a legacy BSD one has its own device major;
// - /dev/null (the null driver, wherever its node is).
// TCGETS runs only on a character device that is not /dev/null; TIOCGPTN
// only once TCGETS said it is a terminal, so the daemon issues no ioctl that
// another driver could read differently. An O_PATH fd is no stream at all.
void check_stdio_fd(int fd, const std::string& name, int refused_mode) {
  struct stat st {};
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fstat(fd, &st) != 0) {
    bad_fds(name + " fd cannot be inspected: " + std::strerror(errno));
  }
  if (flags & O_PATH) bad_fds(name + " fd is an O_PATH descriptor, not a stream");
  if (S_ISFIFO(st.st_mode)) {
    struct statfs fs {};
    if (fstatfs(fd, &fs) != 0) bad_fds(name + " fd cannot be inspected: " + std::strerror(errno));
    if (fs.f_type != PIPEFS_MAGIC) bad_fds(name + " fd is a named FIFO, not an anonymous pipe");
  } else if (!S_ISCHR(st.st_mode)) {
    bad_fds(name + " fd is " + kind_name(st));
  } else if (st.st_rdev != makedev(1, 3)) {
    termios modes{};
    unsigned int pty_number = 0;
    if (tcgetattr(fd, &modes) != 0) bad_fds(name + " fd is " + kind_name(st));
    if (ioctl(fd, TIOCGPTN, &pty_number) == 0 || major(st.st_rdev) == kBsdPtyMasterMajor) {
      bad_fds(name + " fd is a pseudo-terminal master, not a terminal");
    }
  }
  if ((flags & O_ACCMODE) == refused_mode) {
    bad_fds(name + (refused_mode == O_WRONLY ? " fd is not readable" : " fd is not writable"));
  }
}

}  // namespace

std::optional<DirectStdio> take_direct_stdio(std::vector<UniqueFd>& fds) {
  if (fds.empty()) return std::nullopt;
  if (fds.size() != 2) {
    bad_fds("direct stdio takes exactly two fds (stdin, stdout), got " +
            std::to_string(fds.size()));
  }
  check_stdio_fd(fds[0].get(), "stdin", O_WRONLY);
  check_stdio_fd(fds[1].get(), "stdout", O_RDONLY);
  DirectStdio direct;
  direct.stdin_read = std::move(fds[0]);
  direct.stdout_write = std::move(fds[1]);
  fds.clear();
  return direct;
}

void admit_caller(Daemon& daemon, const PeerIdentity& peer) {
  if (daemon.shutting_down()) throw Error(v1::ERROR_SHUTTING_DOWN, "the daemon is shutting down");
  if (peer.uid == 0 || peer.gid == 0) {
    throw Error(v1::ERROR_CALLER_IS_ROOT,
                "root cannot launch a role; run the client as the project's owner");
  }
  daemon.reserve_session(peer.uid);
}

// Of the daemon it uses only what is safe from any thread (config,
// idmap_userns).
PreparedLaunch prepare_launch(Daemon& daemon, const PeerIdentity& peer,
                              const wire::ValidRequest& request, bool selftest) {
  const std::string role = wire::role_name(request.role);
  // Step 5: the project, resolved once as the caller.
  ResolvedProject project = resolve_project(peer, request.project_root, role);
  PreparedLaunch out;
  out.auth_home_note = project.auth_home_note;
  // Step 6: the plan, from the config and the kernel's word on the caller.
  out.plan = build_plan(request.role, daemon.role_config(role), peer, project, daemon.config());
  if (selftest) make_selftest_plan(daemon, peer, out.plan);
  // Step 7: the caller's directories, idmapped here: an unsupported
  // filesystem is refused before any launcher is involved.
  const sbv1::IdMapping& ids = out.plan.ids();
  const UniqueFd userns =
      daemon.idmap_userns(ids.caller_uid(), ids.caller_gid(), ids.role_uid(), ids.role_gid());
  out.trees.caller = sandbox::clone_caller_trees(
      out.plan.project_root(), project.root.get(), project.sandbox_dir.get(),
      project.auth_home.valid() ? project.auth_home.get() : -1, userns.get(),
      out.plan.project_writable());
  for (const std::string& path : out.plan.runtime_paths()) {
    out.trees.runtime.push_back(sandbox::clone_runtime_tree(path));
  }
  // Read as root, through a mount that shows what the session's non-recursive clone shows.
  out.scan_root = sandbox::clone_private(project.root.get(), "", AT_EMPTY_PATH,
                                         "project root " + out.plan.project_root());
  if (!out.scan_root.valid()) throw_errno("open_tree project root", v1::ERROR_LAUNCH_FAILED);
  out.host_root = std::move(project.root);
  out.caller_home = project.caller_home;
  return out;
}

void index_project(Daemon& daemon, const PeerIdentity& peer, PreparedLaunch& prepared) {
  const RoleConfig& role = daemon.role_config(prepared.plan.role());
  const std::vector<std::string> patterns(role.hidden_files().begin(), role.hidden_files().end());
  daemon.project_watch().scan(peer.uid, prepared.scan_root.get(), prepared.host_root.get(),
                              patterns);
}

void find_project_exits(Daemon& daemon, const PeerIdentity& peer, PreparedLaunch& prepared) {
  const RoleConfig& role = daemon.role_config(prepared.plan.role());
  const std::vector<std::string> patterns(role.hidden_files().begin(), role.hidden_files().end());
  prepared.scan = daemon.project_watch().scan(peer.uid, prepared.scan_root.get(),
                                              prepared.host_root.get(), patterns);
  std::optional<GitAnswer> git;
  if (prepared.plan.project_writable()) {
    git = daemon.git_query().ask(peer, daemon.seccomp_program_fd(), prepared.plan.project_root(),
                                 prepared.caller_home,
                                 git_units(prepared.plan.project_root(), prepared.scan.findings));
  }
  add_project_exits(role, prepared.scan_root.get(), prepared.scan.findings, git ? &*git : nullptr,
                    prepared.plan);
}

void start_launch(Daemon& daemon, const std::string& session_id, const PeerIdentity& peer,
                  const std::string& role, PreparedLaunch& prepared, DirectStdio* direct,
                  LaunchedSandbox& out) {
  // Step 8: the session's cgroup, with its limits, before anything of it runs.
  out.cgroup = daemon.create_session_cgroup(session_id, peer.uid, daemon.role_config(role));
  out.stdio = make_session_stdio(direct);
  // Step 9: a launcher, prestarted or started now.
  out.sandbox = daemon.take_sandbox();
  // Step 10: limits and accounting hold before the role exists: the launcher
  // waits for its plan, and acts on it only once it is in the session's
  // cgroups (on cgroup v1 it moves itself, through the files sent last).
  std::vector<UniqueFd> tasks_files;
  if (out.cgroup) tasks_files = out.cgroup->attach_launcher(out.sandbox.pid);
  prepared.plan.set_cgroup_tasks_files(static_cast<uint32_t>(tasks_files.size()));
  const sandbox::PlanTrees& trees = prepared.trees;
  std::vector<int> fds = {out.stdio.child[0].get(), out.stdio.child[1].get(),
                          out.stdio.child[2].get(), trees.caller.project.get(),
                          trees.caller.sandbox_dir.get()};
  if (trees.caller.auth_home.valid()) fds.push_back(trees.caller.auth_home.get());
  for (const UniqueFd& tree : trees.runtime) fds.push_back(tree.get());
  for (const UniqueFd& file : tasks_files) fds.push_back(file.get());
  send_plan(out.sandbox.control.get(), prepared.plan.SerializeAsString(), fds);
  // The launcher holds the role's ends now: with a copy here, the role's
  // stdout and stderr would never reach EOF.
  for (UniqueFd& fd : out.stdio.child) fd.reset();
}

}  // namespace pando::daemon
