#include "client/status.h"

#include <iostream>

#include "client/connection.h"
#include "common/printable.h"
#include "proto/helper.pb.h"

namespace pando::client {

namespace v1 = pando::helper::v1;

int run_status(const std::string& socket, const std::string& project_root) {
  std::string error;
  UniqueFd sock = connect_daemon(socket, error);
  if (!sock.valid()) {
    std::cout << "daemon: not reachable\n";
    std::cerr << "pando-helper: " << error << "\n";
    return kExitUnavailable;
  }
  v1::StatusRequest request;
  request.set_project_root(project_root);
  const auto frame = wire::encode_message_frame(v1::FRAME_STATUS_REQUEST, request);
  const bool sent = send_all(sock.get(), frame.data(), frame.size());
  wire::SessionProtocol protocol(wire::Sender::kDaemon);
  const auto answer = read_frame(sock.get(), protocol);
  const auto* refused = answer ? std::get_if<wire::action::Refused>(&answer->action) : nullptr;
  if (!sent && refused == nullptr) {
    std::cerr << "pando-helper: the connection to pando-helperd broke; " << no_answer_hint()
              << "\n";
    return kExitProtocol;
  }
  if (refused != nullptr) return print_rejection("status refused", refused->rejected);
  const auto* reply = answer ? std::get_if<wire::action::StatusReply>(&answer->action) : nullptr;
  if (reply == nullptr) {
    std::cerr << "pando-helper: pando-helperd did not answer the status request; "
              << no_answer_hint() << "\n";
    return kExitProtocol;
  }
  const v1::Status& status = reply->status;
  std::cout << "daemon: answering on " << socket << "\n";
  std::cout << "version: " << status.version() << "\n";
  std::cout << "live sessions: " << status.live_sessions() << "\n";
  for (const auto& layer : status.layers()) {
    std::cout << "layer " << printable(layer.name()) << ": "
              << (layer.available() ? "available" : "unavailable")
              << (layer.detail().empty() ? "" : " (" + printable(layer.detail()) + ")") << "\n";
  }
  return 0;
}

}  // namespace pando::client
