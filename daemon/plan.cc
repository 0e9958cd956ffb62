#include "daemon/plan.h"

#include <optional>
#include <vector>

#include "common/accounts.h"
#include "proto/error.h"
#include "proto/request_validation.h"

namespace pando::daemon {

namespace v1 = pando::helper::v1;
namespace sbv1 = pando::helper::sandbox::v1;

namespace {

std::string group_name(gid_t gid) {
  const std::optional<accounts::Group> group = accounts::group_by_id(gid);
  return group ? group->name : "gid" + std::to_string(gid);
}

}  // namespace

std::vector<std::string> substitute_argv(const RoleConfig& role_config,
                                         const std::string& project_root) {
  static const std::string kToken = "{project_root}";
  std::vector<std::string> argv;
  for (std::string arg : role_config.argv()) {
    for (size_t at = arg.find(kToken); at != std::string::npos;
         at = arg.find(kToken, at + project_root.size())) {
      arg.replace(at, kToken.size(), project_root);
    }
    argv.push_back(std::move(arg));
  }
  return argv;
}

sbv1::SandboxPlan build_plan(v1::Role role, const RoleConfig& role_config, const PeerIdentity& peer,
                             const ResolvedProject& project, const DaemonConfig& config) {
  const std::optional<accounts::User> account = accounts::user_by_name(role_config.user());
  if (!account) {
    throw Error(v1::ERROR_ROLE_NOT_CONFIGURED,
                "role user " + role_config.user() +
                    " does not exist; run `pando-helper security setup-users` as root");
  }
  if (account->uid == 0 || account->gid == 0) {
    throw Error(v1::ERROR_ROLE_NOT_CONFIGURED,
                "role user " + role_config.user() + " must not be root");
  }
  const std::string role_name = wire::role_name(role);
  const std::string sandbox_home = project.path + "/.pando-sandbox/" + role_name;

  sbv1::SandboxPlan plan;
  plan.set_role(role_name);
  for (auto& arg : substitute_argv(role_config, project.path)) plan.add_argv(std::move(arg));
  plan.set_project_root(project.path);
  plan.set_project_writable(role == v1::ROLE_WORKSPACE);
  plan.set_caller_group_private(project.caller_group_private);
  auto* ids = plan.mutable_ids();
  ids->set_caller_uid(peer.uid);
  ids->set_caller_gid(peer.gid);
  ids->set_role_uid(account->uid);
  ids->set_role_gid(account->gid);
  plan.set_role_user_name(account->name);
  plan.set_role_group_name(group_name(account->gid));
  for (const auto& path : role_config.runtime_paths()) plan.add_runtime_paths(path);
  plan.set_sandbox_home(sandbox_home);
  plan.set_has_auth_home(project.auth_home.valid());
  if (project.auth_home.valid()) plan.set_auth_home_target(kAuthHomeTarget);
  plan.set_rlimit_nofile(role_config.limits().rlimit_nofile());
  plan.set_rlimit_core(role_config.limits().rlimit_core());
  plan.set_require_landlock(config.require_landlock());

  // The environment, from scratch. Nothing of the client's reaches it.
  plan.add_env(std::string("PATH=") + kSandboxPath);
  plan.add_env("HOME=" + sandbox_home + "/home");
  // The session's private tmpfs: the only writable place, with /dev/shm, that holds FIFOs and
  // sockets (SECURITY.md, step 17).
  plan.add_env("TMPDIR=/tmp");
  plan.add_env("XDG_CACHE_HOME=" + sandbox_home + "/cache");
  plan.add_env("XDG_CONFIG_HOME=" + sandbox_home + "/config");
  plan.add_env("XDG_DATA_HOME=" + sandbox_home + "/data");
  plan.add_env("USER=" + account->name);
  plan.add_env("LOGNAME=" + account->name);
  plan.add_env("LANG=" + role_config.locale());
  plan.add_env("PANDO_PROCESS_ROLE=" + role_name);
  plan.add_env("PANDO_PROJECT_ROOT=" + project.path);
  if (project.auth_home.valid()) {
    plan.add_env(std::string("PANDO_AUTH_HOME_OVERRIDE=") + kAuthHomeTarget);
  }
  return plan;
}

}  // namespace pando::daemon
