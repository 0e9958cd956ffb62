#include "daemon/project_root.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "common/accounts.h"
#include "common/blocked_syscall.h"
#include "daemon/sandbox/mounts.h"
#include "proto/error.h"

namespace pando::daemon {

namespace v1 = pando::helper::v1;

namespace {

// Trees no project may be, or be inside of.
constexpr const char* kSystemTrees[] = {"/etc",     "/usr",     "/proc",  "/sys",    "/dev",
                                        "/run",     "/boot",    "/root",  "/bin",    "/sbin",
                                        "/lib",     "/lib32",   "/lib64", "/libx32", "/var/lib",
                                        "/var/log", "/var/run", "/snap",  "/nix",    "/lost+found"};
// Directories that may hold projects but are never one themselves.
constexpr const char* kContainers[] = {"/",    "/home", "/var",   "/tmp",   "/srv",
                                       "/opt", "/mnt",  "/media", "/Users", "/var/tmp"};

bool is_same_or_under(const std::string& path, const std::string& tree) {
  return path == tree || (path.size() > tree.size() && path.compare(0, tree.size(), tree) == 0 &&
                          path[tree.size()] == '/');
}

[[noreturn]] void fail_errno(int err, const std::string& what) {
  switch (err) {
    case ENOENT:
      throw Error(v1::ERROR_PATH_NOT_FOUND, what + " does not exist");
    case ELOOP:
      throw Error(v1::ERROR_PATH_SYMLINK, what + " has a symbolic link in it (not followed)");
    case ENOTDIR:
      throw Error(v1::ERROR_PATH_NOT_DIRECTORY, what + " is not a directory");
    case EPERM:
      // A container's seccomp filter answers openat2 with EPERM: a host problem, not the path.
      throw_if_refused_by_environment(kOpenat2Call, what);
      [[fallthrough]];
    case EACCES:
      throw Error(v1::ERROR_PATH_ACCESS_DENIED, what + " is not reachable with your permissions");
    case EXDEV:
      throw Error(v1::ERROR_PATH_SYMLINK, what + " escapes its parent");
    case ENOSYS:  // only openat2 can fail so here
      throw Error(
          v1::ERROR_SANDBOX_UNSUPPORTED,
          blocked_syscall_message("openat2", "needed to open " + what + " without symlinks"));
    default:
      throw Error(v1::ERROR_PATH_NOT_FOUND, what + ": " + std::strerror(err));
  }
}

// Makes (as the caller, through CallerFsIdentity) and opens `name` below
// `parent`, refusing anything that is not a directory owned by the caller.
UniqueFd make_owned_dir(int parent, const std::string& name, uid_t caller,
                        const std::string& shown) {
  if (mkdirat(parent, name.c_str(), 0700) != 0 && errno != EEXIST) fail_errno(errno, shown);
  UniqueFd fd(open_dir_no_symlinks(parent, name));
  if (!fd.valid()) fail_errno(errno, shown);
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) fail_errno(errno, shown);
  if (st.st_uid != caller) throw Error(v1::ERROR_PATH_NOT_OWNED, shown + " is not yours");
  return fd;
}

bool same_file(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

}  // namespace

void check_not_a_home(const struct stat& project, const std::string& shown,
                      const std::string& caller_home, const std::string& homes_dir) {
  struct stat st {};
  if (!caller_home.empty() && stat(caller_home.c_str(), &st) == 0 && same_file(st, project)) {
    throw Error(v1::ERROR_PATH_FORBIDDEN,
                shown + " is your home directory itself (" + caller_home + ")");
  }
  for (const char* container : kContainers) {
    if (stat(container, &st) == 0 && same_file(st, project)) {
      throw Error(v1::ERROR_PATH_FORBIDDEN, shown + " is a system location (" + container + ")");
    }
  }
  DIR* homes = opendir(homes_dir.c_str());
  if (homes == nullptr) return;
  struct Closer {
    DIR* dir;
    ~Closer() { closedir(dir); }
  } closer{homes};
  while (const dirent* entry = readdir(homes)) {
    if (entry->d_name[0] == '.') continue;
    if (fstatat(dirfd(homes), entry->d_name, &st, 0) == 0 && same_file(st, project)) {
      throw Error(v1::ERROR_PATH_FORBIDDEN,
                  shown + " is a home directory itself (" + homes_dir + "/" + entry->d_name + ")");
    }
  }
}

int open_dir_no_symlinks(int dirfd, const std::string& path) {
  struct open_how how {};
  how.flags = O_PATH | O_DIRECTORY | O_CLOEXEC;
  how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  if (dirfd != AT_FDCWD) how.resolve |= RESOLVE_BENEATH;
  return static_cast<int>(syscall(SYS_openat2, dirfd, path.c_str(), &how, sizeof(how)));
}

void check_location_allowed(const std::string& path, const std::string& caller_home) {
  for (const char* tree : kSystemTrees) {
    if (is_same_or_under(path, tree)) {
      throw Error(v1::ERROR_PATH_FORBIDDEN, path + " is a system location");
    }
  }
  for (const char* container : kContainers) {
    if (path == container) throw Error(v1::ERROR_PATH_FORBIDDEN, path + " is a system location");
  }
  if (!caller_home.empty() && path == caller_home) {
    throw Error(v1::ERROR_PATH_FORBIDDEN, path + " is your home directory itself");
  }
  // /home/<name> (and /Users/<name>) are home directories even when the
  // caller's own is elsewhere.
  for (const char* homes : {"/home/", "/Users/"}) {
    const size_t n = std::strlen(homes);
    if (path.compare(0, n, homes) == 0 && path.find('/', n) == std::string::npos) {
      throw Error(v1::ERROR_PATH_FORBIDDEN, path + " is a home directory itself");
    }
  }
}

ProjectIdmapCheck check_project_idmap(const PeerIdentity& peer, const std::string& path,
                                      uid_t role_uid, gid_t role_gid) {
  UniqueFd dir;
  int open_errno = 0;
  {
    CallerFsIdentity as_caller(peer);
    dir.reset(open_dir_no_symlinks(AT_FDCWD, path));
    open_errno = errno;
  }
  if (!dir.valid()) return {false, path + ": " + std::strerror(open_errno)};
  try {
    const auto check =
        sandbox::check_idmap_support(dir.get(), peer.uid, peer.gid, role_uid, role_gid);
    return {check.supported, path + ": " + check.detail};
  } catch (const std::exception& e) {
    return {false, path + ": " + e.what()};
  }
}

ResolvedProject resolve_project(const PeerIdentity& peer, const std::string& path,
                                const std::string& role) {
  const std::optional<accounts::User> caller = accounts::user_by_id(peer.uid);
  const std::string caller_home = caller ? caller->home : "";
  check_location_allowed(path, caller_home);
  ResolvedProject project;
  project.path = path;
  project.caller_home = caller_home;
  if (caller) {
    const std::optional<accounts::Group> group = accounts::group_by_id(peer.gid);
    project.caller_group_private = group && accounts::is_private_group_of(*group, caller->name);
  }

  CallerFsIdentity as_caller(peer);
  project.root.reset(open_dir_no_symlinks(AT_FDCWD, path));
  if (!project.root.valid()) fail_errno(errno, "project root " + path);
  struct stat st {};
  if (fstat(project.root.get(), &st) != 0) fail_errno(errno, "project root " + path);
  if (!S_ISDIR(st.st_mode)) {
    throw Error(v1::ERROR_PATH_NOT_DIRECTORY, "project root " + path + " is not a directory");
  }
  if (st.st_uid != peer.uid) {
    throw Error(v1::ERROR_PATH_NOT_OWNED, "project root " + path + " is not owned by you (uid " +
                                              std::to_string(peer.uid) + ")");
  }
  // The string check above cannot see a home reached by another path (Fedora Silverblue's
  // /home -> var/home): compared by identity, as the caller, before anything is created.
  check_not_a_home(st, "project root " + path, caller_home, "/home");

  const UniqueFd top =
      make_owned_dir(project.root.get(), ".pando-sandbox", peer.uid, path + "/.pando-sandbox");
  project.sandbox_dir = make_owned_dir(top.get(), role, peer.uid, path + "/.pando-sandbox/" + role);
  for (const char* sub : kSandboxSubdirs) {
    make_owned_dir(project.sandbox_dir.get(), sub, peer.uid,
                   path + "/.pando-sandbox/" + role + "/" + sub);
  }

  if (!caller_home.empty() && caller_home.front() == '/') {
    const std::string auth = caller_home == "/" ? "/.pando-ai" : caller_home + "/.pando-ai";
    UniqueFd fd(open_dir_no_symlinks(AT_FDCWD, auth));
    struct stat auth_st {};
    if (fd.valid() && fstat(fd.get(), &auth_st) == 0 && auth_st.st_uid == peer.uid) {
      project.auth_home = std::move(fd);
    } else if (fd.valid()) {
      project.auth_home_note = auth + " is not owned by the caller; not mounted";
    } else if (errno != ENOENT) {
      project.auth_home_note = auth + ": " + std::strerror(errno) + "; not mounted";
    }
  }
  return project;
}

}  // namespace pando::daemon
