#pragma once

// The daemon's project indexes (project_index.h) and the one fanotify group that keeps them
// current between launches. Launch cost then follows what changed in the project since the
// last launch, not its size (SECURITY.md, step 12).
//
// The group has a filesystem mark, for name changes only (create, delete, move of entries and
// directories), on every filesystem that holds an indexed project; a thread of its own reads
// the events and notes the directory each one names in every index that holds it. An index is
// kept only while the kernel can vouch for it:
// - the filesystem is a local one whose every change passes through this kernel's VFS (ext4,
//   xfs, btrfs, f2fs, tmpfs): never a network or FUSE filesystem, whose changes can come from
//   elsewhere, nor overlayfs, whose lower layers change unseen;
// - the mark went in before the first read, and the index belongs to one mount (by its
//   unique id where the kernel has one): a filesystem unmounted and mounted again loses its
//   marks with its superblock, and gets a new mount, so a new index;
// - no event was lost (a full queue or a failed allocation queues an overflow, which
//   invalidates every index).
// Where fanotify, its directory file handles (Linux 5.9) or the filesystem do not allow this,
// every launch reads the whole project, as before the index existed, and `security status`
// says which of the two is in use.

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "common/unique_fd.h"
#include "daemon/project_index.h"

namespace pando::daemon {

// One scan's findings, and what it cost.
struct ProjectScan {
  ProjectFindings findings;
  bool incremental = false;     // false: the whole project was read (see ProjectWatch::mode)
  std::size_t directories = 0;  // in the project
  std::size_t read = 0;         // listed by this scan
};

class ProjectWatch {
 public:
  // Indexes beyond this many directories in all are dropped, least recently used first, but
  // never the one just used (about 100 bytes a directory; a 1M-entry tree shaped like
  // node_modules has about 115,000). Each index counts kIndexOverhead more, which bounds how
  // many small ones are kept.
  static constexpr std::size_t kMaxIndexedDirectories = 1000000;
  static constexpr std::size_t kIndexOverhead = 64;

  // Starts the fanotify group and, with `read_events`, the thread that reads it (tests leave
  // the events queued until a scan); without a group every scan reads the whole project.
  explicit ProjectWatch(bool read_events = true);
  ~ProjectWatch();
  ProjectWatch(const ProjectWatch&) = delete;
  ProjectWatch& operator=(const ProjectWatch&) = delete;

  // What `root_fd` (a mount of the project without submounts, whose host mount is
  // `host_mount_fd`) holds now. The tree is read where nothing vouches for the last reading.
  // Safe from any thread; scans of one index wait for each other. Throws pando::Error.
  ProjectScan scan(uid_t caller, int root_fd, int host_mount_fd,
                   const std::vector<std::string>& hidden_patterns);
  // For `security status` and the log: whether launches read only what changed, and why not.
  std::string mode(int fd_on_filesystem) const;
  // Whether scans of the project on `fd`'s filesystem keep an index.
  bool keeps_index(int fd) const;
  // Directories held by all indexes.
  std::size_t indexed_directories() const;

  // Tests: the group's fd (-1 without one), and whether a filesystem may be watched.
  int fanotify_fd() const { return group_.get(); }
  static bool watchable(int fd, std::string* why);

 private:
  struct Key {
    uid_t caller;
    dev_t dev;
    ino_t ino;
    std::uint64_t mount;
    std::string patterns;
    bool operator<(const Key& other) const {
      return std::tie(caller, dev, ino, mount, patterns) <
             std::tie(other.caller, other.dev, other.ino, other.mount, other.patterns);
    }
  };
  struct Entry {
    std::mutex scanning;
    std::unique_ptr<ProjectIndex> index;
    // Under entries_mutex_.
    std::chrono::steady_clock::time_point used;
    std::size_t directories = 0;
  };

  void read_events();
  void drain();
  void dispatch(const char* buffer, std::size_t length);
  bool mark(int fd, std::string* why);
  void evict_beyond_budget(const Entry* kept);

  UniqueFd group_;
  UniqueFd stop_;
  std::string unavailable_;  // why there is no group
  std::thread reader_;
  // Held while events are read and dispatched: a scan that takes it, drains the queue and
  // finds it empty knows every change made before has been noted.
  std::mutex events_mutex_;
  mutable std::mutex entries_mutex_;
  std::map<Key, std::shared_ptr<Entry>> entries_;
};

}  // namespace pando::daemon
