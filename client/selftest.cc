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

#include "client/connection.h"
#include "common/json_log.h"
#include "proto/helper.pb.h"

namespace pando::client {

namespace v1 = pando::helper::v1;

namespace {

constexpr int kExitChecksFailed = 1;

struct Tally {
  int passed = 0;
  int failed = 0;
  int skipped = 0;
};

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
  const std::string name = role + "/" + check;
  if (json) {
    std::cout << "{\"check\":\"" << log::json_escape(name) << "\",\"result\":\"" << result
              << "\",\"detail\":\"" << log::json_escape(detail) << "\"}\n";
  } else {
    std::cout << result << " " << name << " " << detail << "\n";
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
  const auto answer = read_frame(sock.get());
  v1::Status status;
  if (!sent || !answer || answer->type != v1::FRAME_STATUS ||
      !status.ParseFromArray(answer->payload.data(), static_cast<int>(answer->payload.size()))) {
    std::cerr << "pando-helper: pando-helperd did not answer the status request; "
              << no_answer_hint() << "\n";
    return kExitProtocol;
  }
  for (const auto& layer : status.layers()) {
    if (layer.available()) continue;
    if (json) {
      std::cout << "{\"layer\":\"" << log::json_escape(layer.name())
                << "\",\"available\":false,\"detail\":\"" << log::json_escape(layer.detail())
                << "\"}\n";
    } else {
      std::cout << "UNAVAILABLE " << layer.name() << " " << layer.detail() << "\n";
    }
  }
  return 0;
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
  const auto answer = read_frame(sock.get());
  if (answer && answer->type == v1::FRAME_REJECTED) {
    v1::Rejected rejected;
    rejected.ParseFromArray(answer->payload.data(), static_cast<int>(answer->payload.size()));
    std::cerr << "pando-helper: selftest rejected (" << v1::ErrorCode_Name(rejected.code())
              << "): " << rejected.message() << "\n";
    return kExitRejected;
  }
  if (!sent || !answer || answer->type != v1::FRAME_ACCEPTED) {
    std::cerr << "pando-helper: pando-helperd did not accept the selftest; " << no_answer_hint()
              << "\n";
    return kExitProtocol;
  }
  const auto eof = wire::encode_header(v1::FRAME_STDIN_EOF, 0);
  if (!send_all(sock.get(), eof.data(), eof.size())) return kExitProtocol;
  std::string pending;
  for (;;) {
    const auto next = read_frame(sock.get());
    if (!next) {
      std::cerr << "pando-helper: the connection to pando-helperd broke during the selftest\n";
      return kExitProtocol;
    }
    const std::string bytes(next->payload.begin(), next->payload.end());
    if (next->type == v1::FRAME_STDERR_DATA) {
      std::cerr << bytes;
      continue;
    }
    if (next->type == v1::FRAME_STDOUT_DATA) {
      pending += bytes;
      for (size_t end; (end = pending.find('\n')) != std::string::npos;) {
        print_check(role, pending.substr(0, end), options.json, tally);
        pending.erase(0, end + 1);
      }
      continue;
    }
    if (next->type != v1::FRAME_EXIT) {
      std::cerr << "pando-helper: unexpected frame " << static_cast<int>(next->type)
                << " during the selftest\n";
      return kExitProtocol;
    }
    v1::Exit exit;
    exit.ParseFromArray(next->payload.data(), static_cast<int>(next->payload.size()));
    if (!pending.empty()) print_check(role, pending, options.json, tally);
    if (exit.has_exit_code() && exit.exit_code() == 0) return 0;
    std::cerr << "pando-helper: the " << role << " probe "
              << (exit.has_exit_code() ? "exited with " + std::to_string(exit.exit_code())
                                       : "was killed by signal " + std::to_string(exit.signal()))
              << (exit.message().empty() ? "" : ": " + exit.message()) << "\n";
    return kExitChecksFailed;
  }
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
  if (!options.json) {
    std::cout << "selftest: " << tally.passed << " passed, " << tally.failed << " failed, "
              << tally.skipped << " skipped\n";
  }
  return result;
}

}  // namespace pando::client
