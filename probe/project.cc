// pando-helper-probe: the project as the role sees it (idmapped, read-only or
// writable by role, hidden files, git metadata, the other role's home).

#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "probe/probe.h"

namespace pando::probe {

namespace {

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
  const int fd = try_create(project_root() + "/pando-selftest-write", 0644);
  if (!workspace()) return expect_errno("project.access", fd, EROFS);
  if (fd < 0) {
    return fail("project.access", "workspace cannot write its project: " + errno_name(errno));
  }
  pass("project.access", "workspace writes its project");
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
  expect_errno("project.git_hooks", try_create(hooks + "/pando-selftest", 0755), EROFS);
}

void check_git_rename() {
  const std::string from = project_root() + "/.git";
  const std::string to = project_root() + "/pando-selftest-git";
  const int result = rename(from.c_str(), to.c_str());
  if (result == 0) rename(to.c_str(), from.c_str());
  expect_failure("project.git_rename", result);
}

// Only Landlock keeps FIFOs and sockets out of the project and the role's home, which are on
// disk: a socket bound there is reachable by any process that can open its path, another
// session of the caller included.
void check_no_fifo_in(const std::string& check, const std::string& dir, int abi) {
  if (abi < 1) return skip(check, "Landlock unavailable: FIFOs are not refused");
  const std::string path = dir + "/pando-selftest-fifo";
  const int result = mkfifo(path.c_str(), 0600);
  if (result == 0) unlink(path.c_str());
  expect_errno(check, result, EACCES);
}

void check_no_socket_in(const std::string& check, const std::string& dir, int abi) {
  if (abi < 1) return skip(check, "Landlock unavailable: sockets are not refused");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string path = dir + "/pando-selftest.sock";
  if (path.size() >= sizeof(addr.sun_path)) return skip(check, dir + ": path too long");
  std::strcpy(addr.sun_path, path.c_str());
  const int fd = socket_for(check, AF_UNIX, SOCK_STREAM);
  if (fd < 0) return;
  const int result = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  const int err = errno;
  close(fd);
  if (result == 0) unlink(path.c_str());
  errno = err;
  expect_errno(check, result, EACCES);
}

void check_fifos_and_sockets(int abi) {
  if (workspace()) {
    check_no_fifo_in("project.fifo", project_root(), abi);
    check_no_socket_in("project.unix_socket", project_root(), abi);
  } else {
    skip("project.fifo", "core's project is read-only as a whole");
    skip("project.unix_socket", "core's project is read-only as a whole");
  }
  const char* home = getenv("HOME");
  if (home == nullptr) return fail("home.fifo", "HOME is not set");
  check_no_fifo_in("home.fifo", home, abi);
  check_no_socket_in("home.unix_socket", home, abi);
}

void check_other_role_home() {
  const std::string other = workspace() ? "core" : "workspace";
  const std::string dir = project_root() + "/.pando-sandbox/" + other;
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0) {
    return skip("project.other_role_home", dir + " does not exist yet");
  }
  expect_errno("project.other_role_home", try_create(dir + "/pando-selftest", 0644), EROFS);
}

}  // namespace

void project_checks(int abi) {
  check_project_owner();
  check_project_write();
  check_hidden_env();
  check_git_config();
  check_git_hooks();
  check_git_rename();
  check_fifos_and_sockets(abi);
  check_other_role_home();
}

}  // namespace pando::probe
