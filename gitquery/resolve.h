#pragma once

// Where a path git names leads, resolved as the kernel resolves it for the caller: symbolic
// links outside the project are followed (Fedora Silverblue's /home -> var/home, a ~/src link),
// and the answer is the project-relative path the session would have to pin. A symbolic link
// inside the project on the way is the role's to repoint, so it is reported instead of
// followed; a host mount inside the project is not what the session sees (its view of the
// project carries no submounts), so what lies below one counts as outside.

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace pando::gitquery {

struct Project {
  std::string root;  // the real path, no symbolic link in it
  dev_t dev = 0;
  ino_t ino = 0;
  std::uint64_t mount = 0;
};

// Stats the project root (as the caller); false when it cannot.
bool load_project(const std::string& root, Project& project);

struct Target {
  enum class Kind {
    // Not in what the session sees of the project, or nothing the caller could open (a name
    // missing outside the project, no search permission): nothing the role could change.
    kOutside,
    kInside,       // `relative` in the project (existing or not)
    kThroughLink,  // `relative` is a symbolic link in the project on the way
  };
  Kind kind = Kind::kOutside;
  std::string relative;
  // Missing directories that the path passes through and leaves again ("a/new/../b"): the role
  // could make each a symbolic link, so they are made and pinned too.
  std::vector<std::string> passed_through;
};

// `path` is absolute and need not be normalized.
Target resolve(const Project& project, const std::string& path);

// Pure text helpers.
std::string parent_directory(const std::string& path);  // "/a/b" -> "/a", "/a" -> "/"
std::string join_path(const std::string& base, const std::string& relative);

}  // namespace pando::gitquery
