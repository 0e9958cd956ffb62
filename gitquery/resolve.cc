#include "gitquery/resolve.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <deque>
#include <string>
#include <vector>

#include "common/path_components.h"
#include "common/unique_fd.h"

namespace pando::gitquery {

namespace {

// The kernel's limit on links followed in one resolution.
constexpr int kMaxLinks = 40;

std::uint64_t mount_of(int fd) {
  struct statx stx {};
  if (statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW, STATX_MNT_ID, &stx) != 0) return 0;
  return stx.stx_mnt_id;
}

// One resolved component; `fd` is invalid for one that does not exist.
struct Step {
  UniqueFd fd;
  std::string name;
  bool inside = false;
  bool root = false;  // the project root itself
};

// The project-relative path of the top of `stack`, which must be inside.
std::string relative_of(const std::vector<Step>& stack) {
  std::size_t root = stack.size();
  while (root > 0 && !stack[root - 1].root) --root;
  std::string path;
  for (std::size_t i = root; i < stack.size(); ++i) {
    if (!path.empty()) path += '/';
    path += stack[i].name;
  }
  return path;
}

bool read_link(int dir_fd, const std::string& name, std::string& destination) {
  char link[4096];
  const ssize_t length = readlinkat(dir_fd, name.c_str(), link, sizeof(link));
  if (length <= 0 || static_cast<size_t>(length) >= sizeof(link)) return false;
  destination.assign(link, static_cast<size_t>(length));
  return true;
}

std::string child_of(const std::vector<Step>& stack, const std::string& name) {
  const std::string here = relative_of(stack);
  return here.empty() ? name : here + "/" + name;
}

}  // namespace

bool load_project(const std::string& root, Project& project) {
  UniqueFd fd(open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  struct stat st {};
  if (!fd.valid() || fstat(fd.get(), &st) != 0) return false;
  project.root = root;
  project.dev = st.st_dev;
  project.ino = st.st_ino;
  project.mount = mount_of(fd.get());
  return true;
}

std::string parent_directory(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string join_path(const std::string& base, const std::string& relative) {
  if (!relative.empty() && relative.front() == '/') return relative;
  if (base.empty() || base.back() == '/') return base + relative;
  return base + "/" + relative;
}

Target resolve(const Project& project, const std::string& path) {
  const std::vector<std::string> names = path_components(path);
  std::deque<std::string> todo(names.begin(), names.end());
  std::vector<Step> stack;
  const auto start_at_root = [&] {
    stack.clear();
    Step root;
    root.fd.reset(open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
    root.root = project.root == "/";
    root.inside = root.root;
    stack.push_back(std::move(root));
  };
  start_at_root();
  Target target;
  int links = 0;
  while (!todo.empty()) {
    const std::string name = std::move(todo.front());
    todo.pop_front();
    if (name == ".") continue;
    if (name == "..") {
      if (stack.size() > 1) stack.pop_back();
      continue;
    }
    const Step& at = stack.back();
    Step next;
    next.name = name;
    next.inside = at.inside;
    struct stat st {};
    if (!at.fd.valid() || fstatat(at.fd.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      // Missing, in the project: the role could make it, and a name below it.
      if (at.fd.valid() && (errno != ENOENT || !at.inside)) return {};
      if (!todo.empty()) target.passed_through.push_back(child_of(stack, name));
      stack.push_back(std::move(next));
      continue;
    }
    if (S_ISLNK(st.st_mode)) {
      if (at.inside) return {Target::Kind::kThroughLink, child_of(stack, name), {}};
      std::string destination;
      if (++links > kMaxLinks || !read_link(at.fd.get(), name, destination)) return {};
      const std::vector<std::string> more = path_components(destination);
      todo.insert(todo.begin(), more.begin(), more.end());
      if (destination.front() == '/') start_at_root();
      continue;
    }
    next.fd.reset(openat(at.fd.get(), name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
    if (!next.fd.valid()) return {};
    next.root = st.st_dev == project.dev && st.st_ino == project.ino;
    // A host mount inside the project is not in the session's view of it.
    next.inside = next.root || (at.inside && mount_of(next.fd.get()) == project.mount);
    stack.push_back(std::move(next));
  }
  if (!stack.back().inside) return {};
  target.kind = Target::Kind::kInside;
  target.relative = relative_of(stack);
  return target;
}

}  // namespace pando::gitquery
