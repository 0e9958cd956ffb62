#pragma once

// The mount and path primitives the launcher builds the filesystem view with
// (mounts.cc) and pins the project's protected paths with (project_exits.cc).
// Every function throws Error.

#include <sys/mount.h>
#include <sys/statvfs.h>
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/unique_fd.h"

namespace pando::sandbox {

// Scratch entries of the new root's tmpfs that mask files and directories.
// They are removed before pivot_root; the masks keep the inodes alive.
inline constexpr char kMaskFile[] = ".pando-mask-file";
inline constexpr char kMaskDir[] = ".pando-mask-dir";

inline constexpr std::uint64_t kReadOnlyAttrs =
    MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
inline constexpr unsigned long kReadOnlyFlags = ST_RDONLY | ST_NOSUID | ST_NODEV;

// The components of an absolute, normalized path ("/" has none).
std::vector<std::string> split_absolute(const std::string& path, const std::string& what);

// Runs fs operations with the fs credentials of `uid`/`gid` (no DAC override
// unless 0), restoring root's on scope exit. The launcher is single-threaded.
class FsCredentials {
 public:
  FsCredentials(uid_t uid, gid_t gid);
  ~FsCredentials();
  FsCredentials(const FsCredentials&) = delete;
  FsCredentials& operator=(const FsCredentials&) = delete;
};

// Opens the directory `parts` below `root_fd`, one component at a time and
// never following a symlink (ENOTDIR/ELOOP on one). Mounts are crossed. With
// `create`, a missing directory is made with the fs credentials of its
// parent's owner as seen through its mount, so on an idmapped caller mount it
// lands owned by the caller and root's DAC override is never lent.
UniqueFd open_dir_beneath(int root_fd, const std::vector<std::string>& parts, bool create,
                          const std::string& what);

struct MountOption {
  const char* key;
  const char* value;  // nullptr: a flag
};
// A new detached filesystem of `type` (fsopen, fsconfig, fsmount).
UniqueFd new_filesystem(const char* type, const std::vector<MountOption>& options, unsigned attrs);

void set_mount_attrs(int mount_fd, std::uint64_t attrs, bool recursive, const std::string& what,
                     std::uint64_t clear = 0);
// Checks the flags the kernel reports for the mount `fd` lives on.
void verify_mount_flags(int fd, unsigned long want, const std::string& what);
// Moves the detached mount `mount_fd` onto `target_fd` (an O_PATH fd).
void attach(int mount_fd, int target_fd, const std::string& what);
// A detached copy (open_tree(OPEN_TREE_CLONE) with `flags`, e.g. AT_EMPTY_PATH,
// AT_RECURSIVE) that propagates nothing. A copy of a shared mount joins the
// source's peer group (systemd makes / shared): mounts placed on it would
// appear on the host, outliving the session, and the host's would appear
// inside. Every copy the view is built from comes from here. Returns an
// invalid fd with errno set when open_tree fails, unless the environment
// refuses open_tree itself (ERROR_SANDBOX_UNSUPPORTED, thrown).
UniqueFd clone_private(int dir_fd, const char* path, unsigned flags, const std::string& what);
// A detached copy of a root-owned host location (system dirs, runtime paths).
UniqueFd clone_host_tree(int dir_fd, const char* path, bool recursive, const std::string& what);

// Mounts a read-only clone of the root's mask file or directory over the
// entry `target_fd` (an O_PATH fd, so a swapped path cannot redirect it).
void mask_with(int root_fd, const char* mask, int target_fd, const std::string& what);

}  // namespace pando::sandbox
