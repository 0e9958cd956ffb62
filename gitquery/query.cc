#include "gitquery/query.h"

#include <sys/stat.h>

#include <optional>

#include "common/accounts.h"
#include "gitquery/resolve.h"

namespace pando::gitquery {

namespace {

constexpr std::chrono::seconds kGitTimeout{10};
// Config files followed through includes, per query. Git itself stops an include chain at
// depth 10; this only bounds a project that names thousands of files.
constexpr std::size_t kMaxListedFiles = 1024;

bool is_include_key(const std::string& key) {
  if (key == "include.path") return true;
  return key.rfind("includeif.", 0) == 0 && key.size() > 15 &&
         key.compare(key.size() - 5, 5, ".path") == 0;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

// git also declines a repository that is not the caller's (safe.directory): it never reads
// its config then, so neither is anything in it to protect.
bool git_declines_repository(const std::string& err) {
  return says_not_a_repository(err) || err.find("detected dubious ownership") != std::string::npos;
}

}  // namespace

Query::Query(std::string git, std::string home, std::vector<std::string> environment)
    : git_(std::move(git)), home_(std::move(home)), environment_(std::move(environment)) {
  // What every git run reads, whether the files exist now or not.
  findings_.depends.insert(
      {git_, "/etc/gitconfig", home_ + "/.gitconfig", home_ + "/.config/git/config"});
}

void Query::depend_on_git_dir(const std::string& git_dir) {
  for (const char* name : {"HEAD", "commondir", "config", "config.worktree"}) {
    findings_.depends.insert(join_path(git_dir, name));
  }
}

GitRun Query::git(const std::string& directory, const std::vector<std::string>& args) const {
  return run_git(git_, directory, args, environment_, kGitTimeout);
}

void Query::refuse(const std::string& path, const GitRun& run) {
  std::string message = run.err;
  while (!message.empty() && (message.back() == '\n' || message.back() == '\r')) {
    message.pop_back();
  }
  if (message.empty()) message = "git exited with status " + std::to_string(run.exit_status);
  findings_.errors.push_back(path + ": " + message);
}

void Query::run(const Unit& unit) {
  if (unit.worktree) {
    run_worktree(unit.path);
  } else {
    run_git_dir(unit.path);
  }
}

// Git finds the repository from `path` as it does for the caller there. Outside any
// repository it still reads the system and global files, which may name files of the project.
void Query::run_worktree(const std::string& path) {
  // Discovery looks for .git here and in every directory above.
  for (std::string at = path;; at = parent_directory(at)) {
    findings_.depends.insert(join_path(at, ".git"));
    if (at == "/") break;
  }
  const GitRun where =
      git(path, {"rev-parse", "--is-bare-repository", "--absolute-git-dir", "--show-toplevel"});
  // A directory the caller cannot enter: its git runs nothing there, and its name is not the
  // caller's to learn.
  if (!where.started) return;
  const std::vector<std::string> lines = lines_of(where.out);
  std::string hooks_base;
  if (where.ran && lines.size() >= 2 && lines[0] == "true") {
    // Bare (--show-toplevel refuses after the rest): hooks run in the git dir.
    covered_git_dirs_.insert(lines[1]);
    depend_on_git_dir(lines[1]);
    hooks_base = lines[1];
  } else if (where.ran && where.exit_status == 0 && lines.size() == 3) {
    covered_git_dirs_.insert(lines[1]);
    depend_on_git_dir(lines[1]);
    hooks_base = lines[2];  // a relative core.hooksPath is the working tree's
  } else if (!where.ran || !git_declines_repository(where.err)) {
    return refuse(path, where);
  }
  list_config(path, {}, hooks_base);
}

// A git dir found by its shape (HEAD, objects/ and refs/) that no working tree here led to: a
// bare repository, a submodule not checked out, or one git does not take for a repository
// now (a broken HEAD), which the role could mend.
void Query::run_git_dir(const std::string& path) {
  // A working tree led to it already (the project's paths have no link, so git names it so).
  if (covered_git_dirs_.count(path) != 0) return;
  depend_on_git_dir(path);
  const GitRun where =
      git(path, {"--git-dir=.", "rev-parse", "--is-bare-repository", "--absolute-git-dir"});
  if (!where.started) return;
  const std::vector<std::string> lines = lines_of(where.out);
  if (where.ran && where.exit_status == 0 && lines.size() == 2) {
    if (!covered_git_dirs_.insert(lines[1]).second) return;
    // Not bare: its working tree is outside the project (else it would have been covered),
    // and so is a relative core.hooksPath of it.
    return list_config(path, {"--git-dir=."}, lines[0] == "true" ? lines[1] : "");
  }
  if (!where.ran || !git_declines_repository(where.err)) return refuse(path, where);
  for (const char* name : {"config", "config.worktree"}) {
    includes_.push_back(join_path(path, name));
  }
  follow_includes("");
}

void Query::list_config(const std::string& directory, const std::vector<std::string>& context,
                        const std::string& hooks_base) {
  std::vector<std::string> args = context;
  args.insert(args.end(), {"config", "--list", "--show-origin", "--show-scope", "-z"});
  const GitRun listing = git(directory, args);
  std::vector<ConfigEntry> entries;
  if (!listing.ran || listing.exit_status != 0) return refuse(directory, listing);
  if (!parse_config_listing(listing.out, true, entries)) {
    findings_.errors.push_back(directory +
                               ": git's listing of its config cannot be read unambiguously");
    return;
  }
  take_entries(entries, directory, hooks_base);
  follow_includes(hooks_base);
}

void Query::take_entries(const std::vector<ConfigEntry>& entries, const std::string& directory,
                         const std::string& hooks_base) {
  for (const ConfigEntry& entry : entries) {
    // Command-line values and blobs are not files anyone can change.
    if (entry.origin.rfind("file:", 0) != 0) continue;
    const std::string file = join_path(directory, entry.origin.substr(5));
    findings_.config_files.insert(file);
    findings_.depends.insert(file);
    listed_.insert(file);
    if (!entry.has_value || entry.value.empty()) continue;
    if (is_include_key(entry.key)) {
      const std::string target = expand(entry.value, parent_directory(file));
      if (!target.empty()) includes_.push_back(target);
    } else if (entry.key == "core.hookspath") {
      const bool absolute = entry.value.front() == '/' || entry.value.front() == '~';
      if (absolute || !hooks_base.empty()) {
        const std::string hooks = expand(entry.value, hooks_base);
        if (!hooks.empty()) findings_.hooks_dirs.insert(hooks);
      }
    }
  }
}

// Each file an include names, listed on its own (git does not read the ones whose condition
// is false today, nor missing ones): its own includes and hooks paths count too.
void Query::follow_includes(const std::string& hooks_base) {
  while (!includes_.empty()) {
    const std::string file = includes_.back();
    includes_.pop_back();
    findings_.config_files.insert(file);
    findings_.depends.insert(file);
    if (!listed_.insert(file).second) continue;
    if (listed_.size() > kMaxListedFiles) {
      findings_.errors.push_back(file + ": more than " + std::to_string(kMaxListedFiles) +
                                 " config files are included");
      includes_.clear();
      return;
    }
    struct stat st {};
    if (stat(file.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    const GitRun listing = git("/", {"config", "--file", file, "--list", "--show-origin", "-z"});
    std::vector<ConfigEntry> entries;
    // A file git does not read today need not parse: were it ever followed, git would refuse
    // it then, and run nothing of it.
    if (!listing.ran || listing.exit_status != 0 ||
        !parse_config_listing(listing.out, false, entries)) {
      continue;
    }
    take_entries(entries, "/", hooks_base);
  }
}

// As git's interpolate_path: ~/ is the caller's home, ~user/ that user's; a relative path is
// relative to `base`.
std::string Query::expand(const std::string& value, const std::string& base) const {
  if (value.front() != '~') return join_path(base, value);
  const std::size_t slash = value.find('/');
  const std::string user = value.substr(1, slash == std::string::npos ? slash : slash - 1);
  const std::string rest = slash == std::string::npos ? "" : value.substr(slash);
  if (user.empty()) return home_ + rest;
  const std::optional<accounts::User> account = accounts::user_by_name(user);
  return account ? account->home + rest : "";
}

}  // namespace pando::gitquery
