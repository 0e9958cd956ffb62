#include "daemon/project_watch.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/fanotify.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>

#include "common/json_log.h"
#include "proto/error.h"

#ifndef STATX_MNT_ID_UNIQUE
#define STATX_MNT_ID_UNIQUE 0x4000U  // Linux 6.8: never reused, unlike STATX_MNT_ID
#endif
#ifndef F2FS_SUPER_MAGIC
#define F2FS_SUPER_MAGIC 0xF2F52010
#endif

namespace pando::daemon {

namespace {

using pando::helper::v1::ERROR_PROJECT_SCAN_INCOMPLETE;

// Name changes only: what a directory lists is all an index holds.
constexpr std::uint64_t kNameChanges =
    FAN_CREATE | FAN_DELETE | FAN_MOVED_FROM | FAN_MOVED_TO | FAN_ONDIR;

std::uint64_t fnv1a(std::uint64_t hash, const unsigned char* bytes, std::size_t length) {
  for (std::size_t i = 0; i < length; ++i) {
    hash ^= bytes[i];
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

std::uint64_t hash_handle(int type, const unsigned char* bytes, std::size_t length) {
  const std::uint64_t hash =
      fnv1a(0xcbf29ce484222325ULL, reinterpret_cast<const unsigned char*>(&type), sizeof(type));
  return fnv1a(hash, bytes, length);
}

// What fanotify reports a directory by: its file handle, of which the index keeps a hash (a
// collision only makes a directory read again for nothing).
std::uint64_t handle_identity(int fd) {
  alignas(file_handle) unsigned char storage[sizeof(file_handle) + MAX_HANDLE_SZ];
  auto* handle = reinterpret_cast<file_handle*>(storage);
  handle->handle_bytes = MAX_HANDLE_SZ;
  int mount_id = 0;
  if (name_to_handle_at(fd, "", handle, &mount_id, AT_EMPTY_PATH) != 0) {
    throw_errno("name_to_handle_at of a project directory", ERROR_PROJECT_SCAN_INCOMPLETE);
  }
  return hash_handle(handle->handle_type, handle->f_handle, handle->handle_bytes);
}

// Without a watch the identity only tells whether a directory opened again is the same one.
std::uint64_t inode_identity(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0) throw_errno("fstat", ERROR_PROJECT_SCAN_INCOMPLETE);
  return (static_cast<std::uint64_t>(st.st_dev) << 40) ^ st.st_ino;
}

std::string joined(const std::vector<std::string>& patterns) {
  std::string out;
  for (const std::string& pattern : patterns) out += pattern + '\0';
  return out;
}

}  // namespace

bool ProjectWatch::watchable(int fd, std::string* why) {
  struct statfs fs {};
  if (fstatfs(fd, &fs) != 0) {
    *why = std::string("fstatfs: ") + std::strerror(errno);
    return false;
  }
  switch (static_cast<unsigned long>(fs.f_type)) {
    case EXT4_SUPER_MAGIC:  // ext2, ext3 and ext4 alike
    case XFS_SUPER_MAGIC:
    case BTRFS_SUPER_MAGIC:
    case F2FS_SUPER_MAGIC:
    case TMPFS_MAGIC:
      return true;
    default:
      char type[32];
      std::snprintf(type, sizeof(type), "0x%lx", static_cast<unsigned long>(fs.f_type));
      *why = std::string("its filesystem (type ") + type +
             ") is not one whose every change this kernel sees (ext4, xfs, btrfs, f2fs, tmpfs)";
      return false;
  }
}

ProjectWatch::ProjectWatch(bool read_events) {
  group_.reset(fanotify_init(FAN_CLASS_NOTIF | FAN_CLOEXEC | FAN_NONBLOCK | FAN_REPORT_DFID_NAME,
                             O_RDONLY | O_CLOEXEC));
  if (!group_.valid()) {
    const int error = errno;
    unavailable_ = std::string("fanotify_init: ") + std::strerror(error) +
                   (error == EINVAL ? " (directory file handles need Linux 5.9)"
                    : error == EPERM || error == ENOSYS
                        ? " (no CAP_SYS_ADMIN, or a seccomp filter of the service manager)"
                        : "");
    return;
  }
  stop_.reset(eventfd(0, EFD_CLOEXEC));
  if (!stop_.valid()) {
    unavailable_ = std::string("eventfd: ") + std::strerror(errno);
    group_.reset();
    return;
  }
  if (read_events) reader_ = std::thread([this] { this->read_events(); });
}

ProjectWatch::~ProjectWatch() {
  if (!reader_.joinable()) return;
  const std::uint64_t one = 1;
  if (write(stop_.get(), &one, sizeof(one)) == sizeof(one)) {
    reader_.join();
  } else {
    reader_.detach();  // cannot happen with an eventfd; never leave a joinable thread
  }
}

void ProjectWatch::read_events() {
  for (;;) {
    pollfd fds[2] = {{group_.get(), POLLIN, 0}, {stop_.get(), POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      log::error("project_watch_failed", {{"error", std::string("poll: ") + std::strerror(errno)}});
      return;
    }
    if (fds[1].revents != 0) return;
    std::lock_guard lock(events_mutex_);
    drain();
  }
}

// With events_mutex_ held.
void ProjectWatch::drain() {
  alignas(fanotify_event_metadata) char buffer[64 * 1024];
  for (;;) {
    const ssize_t got = read(group_.get(), buffer, sizeof(buffer));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && errno == EAGAIN) return;
    if (got <= 0) {
      // No event can be trusted to have arrived: nothing is kept.
      log::error("project_watch_failed", {{"error", std::string("read: ") + std::strerror(errno)}});
      std::lock_guard lock(entries_mutex_);
      for (auto& [key, entry] : entries_) entry->index->invalidate();
      return;
    }
    dispatch(buffer, static_cast<std::size_t>(got));
  }
}

// An event is as long as the name it carries, so events and their records are only 4-byte
// aligned in the buffer: each header is copied out before it is read.
void ProjectWatch::dispatch(const char* buffer, std::size_t length) {
  constexpr std::size_t kHandleAt = offsetof(fanotify_event_info_fid, handle);
  std::vector<std::uint64_t> changed;
  bool overflow = false;
  for (std::size_t offset = 0; length - offset >= sizeof(fanotify_event_metadata);) {
    fanotify_event_metadata event;
    std::memcpy(&event, buffer + offset, sizeof(event));
    if (event.event_len < sizeof(event) || event.event_len > length - offset ||
        event.metadata_len < sizeof(event) || event.metadata_len > event.event_len) {
      overflow = true;  // never from this kernel; nothing read from here on is trusted
      break;
    }
    if (event.mask & FAN_Q_OVERFLOW) overflow = true;
    const std::size_t end = offset + event.event_len;
    for (std::size_t at = offset + event.metadata_len;
         end - at >= sizeof(fanotify_event_info_header);) {
      fanotify_event_info_header info;
      std::memcpy(&info, buffer + at, sizeof(info));
      if (info.len == 0 || info.len > end - at) {
        overflow = true;  // as above: a record that cannot be read may have named a change
        break;
      }
      if ((info.info_type == FAN_EVENT_INFO_TYPE_DFID_NAME ||
           info.info_type == FAN_EVENT_INFO_TYPE_DFID) &&
          info.len >= kHandleAt + sizeof(file_handle)) {
        file_handle handle;
        std::memcpy(&handle, buffer + at + kHandleAt, sizeof(handle));
        const std::size_t bytes_at = at + kHandleAt + sizeof(handle);
        if (handle.handle_bytes > at + info.len - bytes_at) {
          overflow = true;
          break;
        }
        changed.push_back(hash_handle(handle.handle_type,
                                      reinterpret_cast<const unsigned char*>(buffer + bytes_at),
                                      handle.handle_bytes));
      }
      at += info.len;
    }
    offset = end;
  }
  std::lock_guard lock(entries_mutex_);
  for (auto& [key, entry] : entries_) {
    if (overflow) entry->index->invalidate();
    for (const std::uint64_t identity : changed) entry->index->note_change(identity);
  }
}

// Idempotent, and repeated at every scan: cheap, and a filesystem mounted anew has lost it.
bool ProjectWatch::mark(int fd, std::string* why) {
  if (fanotify_mark(group_.get(), FAN_MARK_ADD | FAN_MARK_FILESYSTEM, kNameChanges, fd, nullptr) ==
      0) {
    return true;
  }
  *why = std::string("fanotify_mark: ") + std::strerror(errno);
  return false;
}

std::string ProjectWatch::mode(int fd_on_filesystem) const {
  if (!group_.valid()) return "every launch reads the whole project: " + unavailable_;
  std::string why;
  if (fd_on_filesystem >= 0 && !watchable(fd_on_filesystem, &why)) {
    return "every launch reads the whole project: " + why;
  }
  return "a launch reads what changed since the last one (fanotify)";
}

bool ProjectWatch::keeps_index(int fd) const {
  std::string why;
  return group_.valid() && watchable(fd, &why);
}

std::size_t ProjectWatch::indexed_directories() const {
  std::lock_guard lock(entries_mutex_);
  std::size_t total = 0;
  for (const auto& [key, entry] : entries_) total += entry->directories;
  return total;
}

ProjectScan ProjectWatch::scan(uid_t caller, int root_fd, int host_mount_fd,
                               const std::vector<std::string>& hidden_patterns) {
  UniqueFd dir(openat(root_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) throw_errno("open the project root", ERROR_PROJECT_SCAN_INCOMPLETE);
  std::string why;
  if (!group_.valid() || !watchable(dir.get(), &why) || !mark(dir.get(), &why)) {
    ProjectIndex once(hidden_patterns, inode_identity);
    once.update(dir.get());
    return {once.findings(), false, once.directories(), once.last_read()};
  }
  struct stat st {};
  struct statx mount {};
  if (fstat(dir.get(), &st) != 0 ||
      statx(host_mount_fd, "", AT_EMPTY_PATH, STATX_MNT_ID | STATX_MNT_ID_UNIQUE, &mount) != 0) {
    throw_errno("stat the project root", ERROR_PROJECT_SCAN_INCOMPLETE);
  }
  const Key key{caller, st.st_dev, st.st_ino, mount.stx_mnt_id, joined(hidden_patterns)};
  std::shared_ptr<Entry> entry;
  {
    std::lock_guard lock(entries_mutex_);
    std::shared_ptr<Entry>& slot = entries_[key];
    if (!slot) {
      slot = std::make_shared<Entry>();
      slot->index = std::make_unique<ProjectIndex>(hidden_patterns, handle_identity);
    }
    entry = slot;
  }
  ProjectScan result;
  {
    std::lock_guard scanning(entry->scanning);
    {
      // Every change made before this point has been noted once the queue is empty.
      std::lock_guard events(events_mutex_);
      drain();
    }
    result.incremental = !entry->index->needs_full_read();
    entry->index->update(dir.get());
    result.findings = entry->index->findings();
    result.directories = entry->index->directories();
    result.read = entry->index->last_read();
  }
  {
    std::lock_guard lock(entries_mutex_);
    entry->used = std::chrono::steady_clock::now();
    entry->directories = result.directories;
  }
  evict_beyond_budget(entry.get());
  return result;
}

void ProjectWatch::evict_beyond_budget(const Entry* kept) {
  std::lock_guard lock(entries_mutex_);
  const auto cost = [](const Entry& entry) { return entry.directories + kIndexOverhead; };
  std::size_t total = 0;
  for (const auto& [key, entry] : entries_) total += cost(*entry);
  while (total > kMaxIndexedDirectories) {
    auto oldest = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->second.get() != kept &&
          (oldest == entries_.end() || it->second->used < oldest->second->used)) {
        oldest = it;
      }
    }
    if (oldest == entries_.end()) return;
    total -= cost(*oldest->second);
    entries_.erase(oldest);
  }
}

}  // namespace pando::daemon
