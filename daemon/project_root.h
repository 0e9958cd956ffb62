#pragma once

#include <sys/stat.h>

#include <string>

#include "common/unique_fd.h"
#include "daemon/peer_identity.h"

namespace pando::daemon {

// The caller's project, resolved once. Everything after this works from the
// fds, never from the path string again.
struct ResolvedProject {
  std::string path;            // the validated string, where it appears inside the sandbox
  UniqueFd root;               // O_PATH directory fd
  UniqueFd sandbox_dir;        // <project>/.pando-sandbox/<role>, O_PATH
  UniqueFd auth_home;          // the caller's ~/.pando-ai, O_PATH; invalid when absent
  std::string auth_home_note;  // why an existing auth home was not used, for the log
  std::string caller_home;     // from the caller's account; empty when it has none
  // The caller's gid is its user-private group (accounts::is_private_group_of): group write on
  // what belongs to it reaches nobody else.
  bool caller_group_private = false;
};

// Subdirectories of <project>/.pando-sandbox/<role>/ the daemon creates.
inline constexpr const char* kSandboxSubdirs[] = {"home", "cache", "config", "data"};

// Refuses system locations and home directories themselves (string check on
// an already normalized path) with ERROR_PATH_FORBIDDEN.
void check_location_allowed(const std::string& path, const std::string& caller_home);

// Refuses (ERROR_PATH_FORBIDDEN) a project that is, by device and inode, the caller's home
// (`caller_home` followed through symlinks), a container such as /home or /tmp, or any
// directory in `homes_dir` (/home). Call with the caller's filesystem identity.
void check_not_a_home(const struct stat& project, const std::string& shown,
                      const std::string& caller_home, const std::string& homes_dir);

// Resolves `path` with the caller's own filesystem identity and no symlinks
// at any component, checks it is a directory the caller owns, then creates
// (as the caller) and opens .pando-sandbox/<role>/ and its subdirectories, and
// opens ~/.pando-ai when it exists and belongs to the caller. Throws
// pando::Error with the ERROR_PATH_* code of the first refusal.
ResolvedProject resolve_project(const PeerIdentity& peer, const std::string& path,
                                const std::string& role);

// What `security status` says of a project: whether the caller's directory
// (opened with the caller's own filesystem identity) can be idmapped to the
// role. `detail` names the project, and the filesystem or the reason.
struct ProjectIdmapCheck {
  bool supported = false;
  std::string detail;
};
ProjectIdmapCheck check_project_idmap(const PeerIdentity& peer, const std::string& path,
                                      uid_t role_uid, gid_t role_gid);

// openat2() with RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS (and
// RESOLVE_BENEATH when dirfd is not AT_FDCWD); O_PATH | O_DIRECTORY | O_CLOEXEC.
int open_dir_no_symlinks(int dirfd, const std::string& path);

}  // namespace pando::daemon
