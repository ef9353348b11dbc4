#pragma once
// The connection's handshake as the session sees it: the broker's tune and the client's
// tune-ok rewritten (tuning.hpp), and what the session keeps of the rest: the broker's version
// (connection.start; a quorum queue's default delivery limit depends on it), the client's name
// (start-ok, for the dead-letters' x-nackguard-consumer), the vhost (connection.open). Frames
// in, frames and facts out; the frames it does not rewrite are forwarded as they came.

#include <cstdint>
#include <optional>
#include <string>

#include "proxy/amqp/bytes.hpp"
#include "proxy/amqp/frame.hpp"
#include "proxy/session/observer.hpp"
#include "proxy/session/tuning.hpp"

namespace nackguard::session {

class Handshake {
 public:
  explicit Handshake(std::uint32_t max_frame_bytes) : tuning_(max_frame_bytes) {}

  // connection.start: its "version" server property kept (64 bytes at most). One that does
  // not decode is the client's to refuse.
  void broker_start(const amqp::Frame& frame);
  // connection.start-ok: the client's name kept (consumer_label.hpp). One that does not
  // decode is the broker's to refuse.
  void client_start_ok(const amqp::Frame& frame);
  // connection.open: the vhost kept; false if it does not decode.
  bool client_open(const amqp::Frame& frame);
  // The broker's connection.tune as the client is to see it; nullopt if it does not decode.
  std::optional<amqp::Bytes> broker_tune(const amqp::Frame& frame);
  // The client's connection.tune-ok as the broker is to see it; nullopt if it does not decode.
  // Once through, both sides' frames may reach tuning().frame_max().
  std::optional<amqp::Bytes> client_tune_ok(const amqp::Frame& frame);

  const Tuning& tuning() const { return tuning_; }
  const std::string& vhost() const { return vhost_; }
  const std::string& broker_version() const { return broker_version_; }
  const std::string& client_name() const { return client_name_; }
  // What the observer is told at connection.open-ok.
  ConnectionFacts facts(std::uint32_t frame_max) const {
    return {vhost_, tuning_.reserved_channel(), frame_max, broker_version_, client_name_};
  }

 private:
  Tuning tuning_;
  std::string vhost_;
  std::string broker_version_;
  std::string client_name_;
};

}  // namespace nackguard::session
