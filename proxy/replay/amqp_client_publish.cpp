// The publishing half of the replay client: basic.publish with publisher confirms, the
// broker's basic.ack / basic.nack / basic.return for them, and the acks and nacks of originals.

#include <amqp.h>

#include <utility>

#include "proxy/amqp/method_name.hpp"
#include "proxy/amqp/properties.hpp"
#include "proxy/replay/amqp_client.hpp"
#include "proxy/replay/client_internal.hpp"
#include "proxy/replay/errors.hpp"
#include "proxy/replay/fingerprint.hpp"
#include "proxy/replay/rabbitmq_properties.hpp"

namespace nackguard::replay {

namespace {

using namespace detail;  // client_internal.hpp

}  // namespace

std::uint64_t Client::publish(const std::string& exchange, const std::string& routing_key,
                              const amqp::ContentHeader& header, amqp::ByteView body) {
  // The codec refuses what does not fit its length prefixes (a header name over 255 bytes);
  // rabbitmq-c would cut it.
  amqp::Bytes scratch;
  amqp::ByteWriter writer(scratch);
  if (exchange.size() > 255 || routing_key.size() > 255 ||
      !amqp::encode_content_header(writer, header) || !writer.ok()) {
    throw Failure("a message's properties could not be encoded for publishing");
  }
  RabbitProperties properties(header.properties);
  auto armed = arm_write();
  check_write(amqp_basic_publish(connection_, kChannel, bytes_of(exchange), bytes_of(routing_key),
                                 /*mandatory=*/1, /*immediate=*/0, properties.get(),
                                 {body.size(), const_cast<std::uint8_t*>(body.data())}),
              "publishing a copy");
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
      throw Failure(endpoint() + " sent " + amqp::describe_method(unit->method) +
                    " while publisher confirms were awaited");
    }
  }
  return std::exchange(settled_, {});
}

bool Client::on_publisher_event(const Inbound& unit) {
  if (unit.method == AMQP_BASIC_RETURN_METHOD) {
    const std::uint64_t returned = fingerprint(*unit.header, unit.body);
    for (auto& [seq, publish] : outstanding_) {
      if (publish.fingerprint == returned && !publish.returned) {
        publish.returned = describe_reply(unit.code, unit.text);
        break;
      }
    }
    return true;
  }
  if (unit.method == AMQP_BASIC_ACK_METHOD || unit.method == AMQP_BASIC_NACK_METHOD) {
    settle(unit.tag, unit.flag, unit.method == AMQP_BASIC_ACK_METHOD);
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
  auto armed = arm_write();
  check_write(amqp_basic_ack(connection_, kChannel, delivery_tag, /*multiple=*/0),
              "acking an original");
}

void Client::requeue(std::span<const std::uint64_t> delivery_tags) {
  for (std::uint64_t tag : delivery_tags) {
    auto armed = arm_write();
    check_write(amqp_basic_nack(connection_, kChannel, tag, /*multiple=*/0, /*requeue=*/1),
                "requeueing a message kept back");
  }
}

}  // namespace nackguard::replay
