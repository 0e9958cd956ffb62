#pragma once

// What the role may not read or change in the project (SECURITY.md, "Persistence through the
// project" and step 12), decided by the daemon before the plan goes out, from:
// - the project index's findings (project_index.h): the files the hidden_files patterns name,
//   every git dir by its shape whatever its name, the entries named .git;
// - the caller's own git, asked as the caller (git_query.h): which config files it reads,
//   includes it would follow and hooks directories it runs, for every working tree and git dir;
// - the role's read_only_paths.
// The launcher (daemon/sandbox/project_exits.cc) makes what is missing, masks and pins what
// this lists, and opens every path without following a symbolic link.

#include <string>
#include <utility>
#include <vector>

#include "daemon/config.h"
#include "daemon/git_query.h"
#include "daemon/project_index.h"
#include "proto/sandbox.pb.h"

namespace pando::daemon {

// Every git dir of the project: what git takes for one by its shape, and every .git directory
// (one git does not take for a repository now, the role could complete).
std::vector<std::string> git_dirs(const ProjectFindings& findings);

// The working trees ('W': the project root, and every directory holding a .git entry) and git
// dirs ('G') git is asked about, absolute.
std::vector<std::pair<char, std::string>> git_units(const std::string& project_root,
                                                    const ProjectFindings& findings);

// Fills plan.masks (both roles) and, for the writable role, plan.pins. `root_fd` is the
// project (a mount without submounts) and `git` what git answered (workspace only). Throws
// pando::Error when the role could change something git runs and nothing can pin it
// (ERROR_PROTECTED_PATH_UNSUPPORTED, naming what to change) or git refuses a repository
// (ERROR_GIT_REFUSED, with git's message).
void add_project_exits(const RoleConfig& role, int root_fd, const ProjectFindings& findings,
                       const GitAnswer* git, pando::helper::sandbox::v1::SandboxPlan& plan);

}  // namespace pando::daemon
