// The publishing half of the replay client: basic.publish with publisher confirms, the
// broker's basic.ack / basic.nack / basic.return for them, and the acks and nacks of originals.

#include <utility>

#include "proxy/amqp/method_codec.hpp"
#include "proxy/replay/amqp_client.hpp"
#include "proxy/replay/errors.hpp"
#include "proxy/replay/fingerprint.hpp"

namespace nackguard::replay {

std::uint64_t Client::publish(const std::string& exchange, const std::string& routing_key,
                              const amqp::ContentHeader& header, amqp::ByteView body) {
  amqp::BasicPublish method;
  method.exchange = exchange;
  method.routing_key = routing_key;
  method.mandatory = true;
  amqp::Bytes out;
  if (!append_publish(out, kChannel, method, header, body, tuning_.frame_max)) {
    throw Failure("a message's properties could not be encoded for publishing");
  }
  send(out);
  const std::uint64_t seq = ++publish_seq_;
  outstanding_[seq].fingerprint = fingerprint(header, body);
  return seq;
}

std::vector<Confirmation> Client::confirms(bool wait) {
  const auto deadline = reply_deadline();
  while (wait && settled_.empty() && !outstanding_.empty()) {
    std::optional<Inbound> unit = next(deadline);
    if (!unit) {
      throw Failure(endpoint() + " sent no publisher confirm within " +
                    std::to_string(settings_.reply_timeout.count() / 1000) + " s" +
                    (blocked_ ? " (it has blocked publishing: a memory or disk alarm)" : ""));
    }
    if (!on_publisher_event(*unit)) {
      throw Failure(endpoint() + " sent method " + describe_method(unit->method_key) +
                    " while publisher confirms were awaited");
    }
  }
  return std::exchange(settled_, {});
}

bool Client::on_publisher_event(const Inbound& unit) {
  if (unit.kind == Inbound::Kind::content && unit.method_key == amqp::mid::basic_return) {
    amqp::BasicReturn ret;
    amqp::decode_method(unit.method, ret);
    const std::uint64_t returned = fingerprint(unit.header, unit.body);
    for (auto& [seq, publish] : outstanding_) {
      if (publish.fingerprint == returned && !publish.returned) {
        publish.returned = describe_reply(ret.reply_code, ret.reply_text);
        break;
      }
    }
    return true;
  }
  if (unit.method_key == amqp::mid::basic_ack) {
    amqp::BasicAck ack;
    if (amqp::decode_method(unit.method, ack) != amqp::MethodError::none) {
      throw Failure(endpoint() + " sent a malformed basic.ack");
    }
    settle(ack.delivery_tag, ack.multiple, true);
    return true;
  }
  if (unit.method_key == amqp::mid::basic_nack) {
    amqp::BasicNack nack;
    if (amqp::decode_method(unit.method, nack) != amqp::MethodError::none) {
      throw Failure(endpoint() + " sent a malformed basic.nack");
    }
    settle(nack.delivery_tag, nack.multiple, false);
    return true;
  }
  return false;
}

void Client::settle(std::uint64_t tag, bool multiple, bool acked) {
  auto first = multiple ? outstanding_.begin() : outstanding_.find(tag);
  auto last = multiple ? outstanding_.upper_bound(tag)
                       : (first == outstanding_.end() ? first : std::next(first));
  for (auto it = first; it != last; ++it) {
    Confirmation confirmation;
    confirmation.seq = it->first;
    if (!acked) {
      confirmation.outcome = {PublishOutcome::Kind::nacked, ""};
    } else if (it->second.returned) {
      confirmation.outcome = {PublishOutcome::Kind::returned, *it->second.returned};
    }
    settled_.push_back(std::move(confirmation));
  }
  outstanding_.erase(first, last);
}

void Client::ack(std::uint64_t delivery_tag) {
  amqp::BasicAck ack;
  ack.delivery_tag = delivery_tag;
  amqp::append_fixed_method_frame(queued_, kChannel, ack);
}

void Client::requeue(std::span<const std::uint64_t> delivery_tags) {
  for (std::uint64_t tag : delivery_tags) {
    amqp::BasicNack nack;
    nack.delivery_tag = tag;
    nack.requeue = true;
    amqp::append_fixed_method_frame(queued_, kChannel, nack);
  }
}

}  // namespace nackguard::replay
