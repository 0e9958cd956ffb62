#include "client/selftest.h"

#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>

#include "client/caller_git.h"
#include "client/connection.h"
#include "common/json_log.h"
#include "common/printable.h"
#include "proto/helper.pb.h"

namespace pando::client {

namespace v1 = pando::helper::v1;

namespace {

constexpr int kExitChecksFailed = 1;

struct Tally {
  int passed = 0;
  int failed = 0;
  int skipped = 0;
  int warned = 0;
};

void print_result(const std::string& name, const std::string& result, const std::string& detail,
                  bool json) {
  if (json) {
    std::cout << "{\"check\":\"" << log::json_escape(name) << "\",\"result\":\"" << result
              << "\",\"detail\":\"" << log::json_escape(detail) << "\"}\n";
  } else {
    std::cout << result << " " << printable(name) << " " << printable(detail) << "\n";
  }
}

// One probe line, `RESULT check detail`, printed for a person or as JSON.
void print_check(const std::string& role, const std::string& line, bool json, Tally& tally) {
  const size_t first = line.find(' ');
  std::string result = line.substr(0, first);
  std::string check = first == std::string::npos ? "" : line.substr(first + 1);
  std::string detail;
  if (const size_t second = check.find(' '); second != std::string::npos) {
    detail = check.substr(second + 1);
    check.resize(second);
  }
  if (result == "PASS") {
    ++tally.passed;
  } else if (result == "SKIP") {
    ++tally.skipped;
  } else {
    // A line that is no result is a probe gone wrong: a failure, shown whole.
    if (result != "FAIL") {
      detail = "unexpected probe output: " + line;
      check = "probe";
    }
    result = "FAIL";
    ++tally.failed;
  }
  print_result(role + "/" + check, result, detail, json);
}

// Not layers of the sandbox but settings of the caller's own git, which close the git exits the
// sandbox cannot: WARN when one is missing, counted apart from failures.
void print_caller_git(bool json, Tally& tally) {
  for (const CallerGitCheck& check : check_caller_git()) {
    if (check.result == "PASS") ++tally.passed;
    if (check.result == "SKIP") ++tally.skipped;
    if (check.result == "WARN") ++tally.warned;
    print_result("caller/" + check.check, check.result, check.detail, json);
  }
}

// The layers `security status` reports unavailable, so that a pass without
// one of them is never mistaken for a pass with it.
int print_unavailable_layers(const std::string& socket, bool json) {
  std::string error;
  UniqueFd sock = connect_daemon(socket, error);
  if (!sock.valid()) {
    std::cerr << "pando-helper: " << error << "\n";
    return kExitUnavailable;
  }
  const auto frame = wire::encode_message_frame(v1::FRAME_STATUS_REQUEST, v1::StatusRequest());
  const bool sent = send_all(sock.get(), frame.data(), frame.size());
  wire::SessionProtocol protocol(wire::Sender::kDaemon);
  const auto answer = read_frame(sock.get(), protocol);
  const auto* reply = answer ? std::get_if<wire::action::StatusReply>(&answer->action) : nullptr;
  if (!sent || reply == nullptr) {
    std::cerr << "pando-helper: pando-helperd did not answer the status request; "
              << no_answer_hint() << "\n";
    return kExitProtocol;
  }
  for (const auto& layer : reply->status.layers()) {
    if (layer.available()) continue;
    if (json) {
      std::cout << "{\"layer\":\"" << log::json_escape(layer.name())
                << "\",\"available\":false,\"detail\":\"" << log::json_escape(layer.detail())
                << "\"}\n";
    } else {
      std::cout << "UNAVAILABLE " << printable(layer.name()) << " " << printable(layer.detail())
                << "\n";
    }
  }
  return 0;
}

// The probe's session, once accepted: its stdout lines become checks, its
// stderr is passed on. Returns what run_probe() returns.
int read_probe_session(int sock, wire::SessionProtocol& protocol, const std::string& role,
                       const SelftestOptions& options, Tally& tally) {
  std::string pending;
  for (;;) {
    const auto next = read_frame(sock, protocol);
    if (!next) {
      std::cerr << "pando-helper: the connection to pando-helperd broke during the selftest\n";
      return kExitProtocol;
    }
    if (const auto* data = std::get_if<wire::action::Data>(&next->action)) {
      const std::string bytes(next->data.begin(), next->data.end());
      if (data->type == v1::FRAME_STDERR_DATA) {
        std::cerr << bytes;
        continue;
      }
      pending += bytes;
      for (size_t end; (end = pending.find('\n')) != std::string::npos;) {
        print_check(role, pending.substr(0, end), options.json, tally);
        pending.erase(0, end + 1);
      }
      continue;
    }
    if (const auto* refused = std::get_if<wire::action::Refused>(&next->action)) {
      return print_rejection("selftest session ended by the daemon", refused->rejected);
    }
    const auto* exited = std::get_if<wire::action::Exited>(&next->action);
    if (exited == nullptr) {
      std::cerr << "pando-helper: the daemon broke the protocol during the selftest\n";
      return kExitProtocol;
    }
    const v1::Exit& exit = exited->exit;
    if (!pending.empty()) print_check(role, pending, options.json, tally);
    if (exit.has_exit_code() && exit.exit_code() == 0) return 0;
    std::cerr << "pando-helper: the " << role << " probe "
              << (exit.has_exit_code() ? "exited with " + std::to_string(exit.exit_code())
                                       : "was killed by signal " + std::to_string(exit.signal()))
              << (exit.message().empty() ? "" : ": " + printable(exit.message())) << "\n";
    return kExitChecksFailed;
  }
}

// One session of the probe as `role`. Returns 0 when it ran and exited 0,
// kExitChecksFailed when it ran and reported a failure, or a kExit* code.
int run_probe(const std::string& role, const std::string& project_root,
              const SelftestOptions& options, Tally& tally) {
  v1::SelftestRequest request;
  request.set_role(role == "core" ? v1::ROLE_CORE : v1::ROLE_WORKSPACE);
  request.set_project_root(project_root);
  std::string error;
  UniqueFd sock = connect_daemon(options.socket, error);
  if (!sock.valid()) {
    std::cerr << "pando-helper: " << error << "\n";
    return kExitUnavailable;
  }
  const auto frame = wire::encode_message_frame(v1::FRAME_SELFTEST_REQUEST, request);
  const bool sent = send_all(sock.get(), frame.data(), frame.size());
  wire::SessionProtocol protocol(wire::Sender::kDaemon);
  const auto answer = read_frame(sock.get(), protocol);
  const auto* refused = answer ? std::get_if<wire::action::Refused>(&answer->action) : nullptr;
  if (refused != nullptr) return print_rejection("selftest rejected", refused->rejected);
  if (!sent || !answer || !std::holds_alternative<wire::action::Accepted>(answer->action)) {
    std::cerr << "pando-helper: pando-helperd did not accept the selftest; " << no_answer_hint()
              << "\n";
    return kExitProtocol;
  }
  const auto eof = wire::encode_header(v1::FRAME_STDIN_EOF, 0);
  if (!send_all(sock.get(), eof.data(), eof.size())) return kExitProtocol;
  return read_probe_session(sock.get(), protocol, role, options, tally);
}

int make_writable(const char* path, const struct stat* st, int type, FTW*) {
  if (type == FTW_D || type == FTW_DNR) chmod(path, (st->st_mode & 07777) | S_IRWXU);
  return 0;
}

int remove_entry(const char* path, const struct stat*, int, FTW*) {
  if (remove(path) != 0) {
    std::cerr << "pando-helper: remove " << path << ": " << std::strerror(errno) << "\n";
  }
  return 0;
}

// Everything in it is this user's (what the roles wrote lands as the caller).
void remove_tree(const std::string& path) {
  nftw(path.c_str(), make_writable, 16, FTW_PHYS);
  nftw(path.c_str(), remove_entry, 16, FTW_PHYS | FTW_DEPTH);
}

bool write_file(const std::string& path, const std::string& content) {
  std::ofstream out(path);
  out << content;
  return static_cast<bool>(out);
}

// A fresh project of this user's, made by mkdtemp() (a new name, mode 0700,
// created exclusively: nothing of anyone else's can be in it), holding what
// the probe looks at: a .env to be hidden, git metadata to be pinned and both
// roles' homes (each role checks that the other's is read-only).
std::optional<std::string> make_temporary_project() {
  std::string path = "/tmp/pando-selftest-XXXXXX";
  if (mkdtemp(path.data()) == nullptr) {
    std::cerr << "pando-helper: mkdtemp in /tmp: " << std::strerror(errno) << "\n";
    return std::nullopt;
  }
  const bool made = write_file(path + "/.env", "PANDO_SELFTEST_SECRET=1\n") &&
                    mkdir((path + "/.git").c_str(), 0755) == 0 &&
                    write_file(path + "/.git/config", "[core]\n") &&
                    mkdir((path + "/.git/hooks").c_str(), 0755) == 0 &&
                    mkdir((path + "/.pando-sandbox").c_str(), 0755) == 0 &&
                    mkdir((path + "/.pando-sandbox/core").c_str(), 0755) == 0 &&
                    mkdir((path + "/.pando-sandbox/workspace").c_str(), 0755) == 0;
  if (!made) {
    std::cerr << "pando-helper: cannot fill the temporary project " << path << ": "
              << std::strerror(errno) << "\n";
    remove_tree(path);
    return std::nullopt;
  }
  return path;
}

}  // namespace

int run_selftest(const SelftestOptions& options) {
  if (const int code = print_unavailable_layers(options.socket, options.json); code != 0) {
    return code;
  }
  std::string project = options.project_root;
  if (project.empty()) {
    const auto temporary = make_temporary_project();
    if (!temporary) return kExitSoftware;
    project = *temporary;
  }
  Tally tally;
  int result = 0;
  for (const std::string& role : options.roles) {
    const int code = run_probe(role, project, options, tally);
    if (code != 0 && code != kExitChecksFailed) {
      result = code;
      break;
    }
    if (code != 0) result = kExitChecksFailed;
  }
  if (options.project_root.empty()) remove_tree(project);
  if (result == 0 && tally.failed > 0) result = kExitChecksFailed;
  if (result == 0 || result == kExitChecksFailed) print_caller_git(options.json, tally);
  if (!options.json) {
    std::cout << "selftest: " << tally.passed << " passed, " << tally.failed << " failed, "
              << tally.skipped << " skipped, " << tally.warned << " warnings\n";
  }
  return result;
}

}  // namespace pando::client
