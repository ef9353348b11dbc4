#include "proxy/session/proxy_channel.hpp"

#include <algorithm>

#include "proxy/amqp/method_codec.hpp"

namespace nackguard::session {

namespace mid = amqp::mid;

namespace {
// A queue the proxy could not declare is not tried again for this long: each try costs a
// channel, and the cause (a missing permission) rarely goes away by itself.
constexpr std::int64_t kDeclareRetryMs = 30000;
constexpr std::uint16_t kNotFound = 404;  // a passive declare of an absent queue
// An active declare of a queue that exists with other arguments (or of another type).
constexpr std::uint16_t kPreconditionFailed = 406;

// Sends a method that has no field from outside the proxy (channel.open, confirm.select,
// close-ok): it always encodes; if it ever did not, nothing would be sent.
template <typename M>
void append_fixed(amqp::Bytes& out, std::uint16_t channel, const M& method) {
  amqp::Bytes frame;
  if (amqp::append_method_frame(frame, channel, method))
    out.insert(out.end(), frame.begin(), frame.end());
}
}  // namespace

void ProxyChannel::configure(std::optional<std::uint16_t> channel, std::uint32_t frame_max) {
  channel_ = channel;
  frame_max_ = std::max<std::uint32_t>(frame_max == 0 ? 131072 : frame_max, amqp::kFrameMinSize);
}

void ProxyChannel::finish(Ticket ticket, retry::FallbackCause failure, std::string why) {
  output_.outcomes.push_back({std::move(ticket), failure, std::move(why)});
}

void ProxyChannel::send(amqp::Bytes frames) {
  output_.frames.insert(output_.frames.end(), frames.begin(), frames.end());
}

void ProxyChannel::publish(PublishRequest request, std::int64_t now_ms) {
  if (!channel_) {
    finish(std::move(request.ticket), retry::FallbackCause::no_channel,
           "no channel left for the proxy (the broker's channel_max is 1)");
    return;
  }
  waiting_.push_back(std::move(request));
  pump(now_ms);
}

void ProxyChannel::pump(std::int64_t now_ms) {
  if (waiting_.empty()) return;
  if (state_ == State::closed) {
    append_fixed(output_.frames, *channel_, amqp::ChannelOpen{});
    state_ = State::opening;
    return;
  }
  if (state_ != State::ready) return;
  while (!waiting_.empty()) {
    PublishRequest& head = waiting_.front();
    if (head.ensure) {
      QueueInfo& info = queues_[head.ensure->name];
      if (info.status == QueueStatus::failed && now_ms < info.failed_until_ms) {
        PublishRequest failed = std::move(head);
        waiting_.pop_front();
        finish(std::move(failed.ticket), retry::FallbackCause::republish_failed,
               "cannot declare queue " + failed.ensure->name + ": " + info.failure);
        continue;
      }
      std::string why;
      if (!ensure_queue(*head.ensure, now_ms, why)) {
        if (why.empty()) return;
        PublishRequest failed = std::move(head);
        waiting_.pop_front();
        finish(std::move(failed.ticket), retry::FallbackCause::encode_failed, why);
        continue;
      }
    }
    PublishRequest request = std::move(head);
    waiting_.pop_front();
    send_publish(request);
  }
}

bool ProxyChannel::ensure_queue(const QueueSpec& spec, std::int64_t now_ms, std::string& why) {
  QueueInfo& info = queues_[spec.name];
  switch (info.status) {
    case QueueStatus::declared:
      if (spec.redeclare_after_ms < 0 || now_ms - info.declared_at_ms < spec.redeclare_after_ms) {
        return true;
      }
      break;
    case QueueStatus::passive_sent:
    case QueueStatus::active_sent:
      return false;
    default:
      break;
  }
  amqp::QueueDeclare declare;
  declare.queue = spec.name;
  bool passive = info.as_is || (spec.use_existing && info.status != QueueStatus::active_needed);
  // A declaration can close the channel: a passive one of an absent queue, by design, and an
  // active one of a queue that exists with other arguments (406). Every publish still in
  // flight would be lost with it, fall back, and stop its queue's copies for
  // kCopiesFailingMs (the consumer-kill fallback storms of docs/reliability.md): so every
  // declaration waits for their confirms, which costs one confirm's wait per queue and channel.
  if (!in_flight_.empty()) return false;
  if (passive) {
    declare.passive = true;
  } else {
    declare.durable = true;
    declare.arguments = spec.arguments;
  }
  amqp::Bytes out;
  if (!amqp::append_method_frame(out, *channel_, declare)) {
    // Nothing was sent, so no declare-ok is awaited: the next one belongs to another queue.
    why = "the queue.declare of \"" + spec.name +
          "\" does not encode (a name over 255 bytes, or its arguments)";
    return false;
  }
  send(std::move(out));
  info.status = passive ? QueueStatus::passive_sent : QueueStatus::active_sent;
  declaring_.push_back(spec.name);
  return false;
}

void ProxyChannel::send_publish(PublishRequest& request) {
  // The method, header and body frames are built whole before any is sent: a header and body
  // without their method would be a connection error (505) on the client's connection.
  amqp::Bytes out;
  amqp::BasicPublish publish;
  publish.exchange = request.exchange;
  publish.routing_key = request.routing_key;
  publish.mandatory = true;  // an unroutable copy comes back as basic.return, never vanishes
  if (!amqp::append_method_frame(out, *channel_, publish)) {
    finish(std::move(request.ticket), retry::FallbackCause::encode_failed,
           "the basic.publish to exchange \"" + request.exchange + "\" with routing key \"" +
               request.routing_key + "\" does not encode (a name over 255 bytes)");
    return;
  }
  const amqp::Bytes empty;
  const amqp::Bytes& body = request.body ? request.body->bytes : empty;
  request.header.body_size = body.size();
  std::size_t method_bytes = out.size();
  bool header_ok = true;
  if (request.raw_properties.empty()) {
    header_ok = amqp::append_content_header_frame(out, *channel_, request.header);
  } else {
    amqp::Bytes payload;
    amqp::ByteWriter w(payload);
    w.u16(request.header.class_id);
    w.u16(request.header.weight);
    w.u64(request.header.body_size);
    w.bytes(request.raw_properties);
    amqp::append_frame(out, amqp::FrameType::header, *channel_, payload);
  }
  if (!header_ok || out.size() - method_bytes > frame_max_) {
    finish(std::move(request.ticket), retry::FallbackCause::encode_failed,
           header_ok ? "the copy's content header is larger than frame_max"
                     : "the copy's properties do not encode");
    return;
  }
  std::size_t chunk = frame_max_ - amqp::kFrameOverhead;
  for (std::size_t at = 0; at < body.size(); at += chunk) {
    std::size_t n = std::min(chunk, body.size() - at);
    amqp::append_frame(out, amqp::FrameType::body, *channel_, amqp::ByteView(body).subspan(at, n));
  }
  in_flight_[++next_seq_] = InFlight{std::move(request.ticket),
                                     request.exchange,
                                     request.routing_key,
                                     request.deadline_ms,
                                     false,
                                     request.ensure ? request.ensure->name : std::string()};
  send(std::move(out));
}

void ProxyChannel::on_frame(const amqp::Frame& frame, std::int64_t now_ms) {
  if (frame.frame_type() == amqp::FrameType::header) {
    if (skip_header_) {
      skip_header_ = false;
      skip_content_ = amqp::peek_body_size(frame.payload).value_or(0);
    }
    return;
  }
  if (frame.frame_type() == amqp::FrameType::body) {
    skip_content_ -= std::min<std::uint64_t>(skip_content_, frame.payload.size());
    return;
  }
  if (frame.frame_type() != amqp::FrameType::method) return;
  if (auto key = amqp::peek_method_key(frame.payload)) on_method(frame, *key, now_ms);
}

void ProxyChannel::on_method(const amqp::Frame& frame, std::uint32_t key, std::int64_t now_ms) {
  switch (key) {
    case mid::channel_open_ok:
      append_fixed(output_.frames, *channel_, amqp::ConfirmSelect{});
      state_ = State::selecting;
      return;
    case mid::confirm_select_ok:
      state_ = State::ready;
      next_seq_ = 0;
      pump(now_ms);
      return;
    case mid::queue_declare_ok:
      on_declare_ok(now_ms);
      pump(now_ms);
      return;
    case mid::basic_ack: {
      amqp::BasicAck ack;
      if (amqp::decode_method(frame.payload, ack) == amqp::MethodError::none) {
        confirm(ack.delivery_tag, ack.multiple, true);
        pump(now_ms);  // a declaration may have waited for the publishes in flight
      }
      return;
    }
    case mid::basic_nack: {
      amqp::BasicNack nack;
      if (amqp::decode_method(frame.payload, nack) == amqp::MethodError::none) {
        confirm(nack.delivery_tag, nack.multiple, false);
        pump(now_ms);
      }
      return;
    }
    case mid::basic_return:
      on_return(frame);
      return;
    case mid::channel_close: {
      amqp::ChannelClose close;
      (void)amqp::decode_method(frame.payload, close);
      append_fixed(output_.frames, *channel_, amqp::ChannelCloseOk{});
      on_channel_closed(close.reply_code, close.reply_text, now_ms);
      return;
    }
    default:
      return;
  }
}

void ProxyChannel::on_declare_ok(std::int64_t now_ms) {
  if (declaring_.empty()) return;
  QueueInfo& info = queues_[declaring_.front()];
  info.status = QueueStatus::declared;
  info.declared_at_ms = now_ms;
  if (info.as_is && !info.as_is_told) {
    info.as_is_told = true;
    output_.notices.push_back({declaring_.front(), info.failure});
  }
  declaring_.pop_front();
}

void ProxyChannel::on_return(const amqp::Frame& frame) {
  amqp::BasicReturn returned;
  if (amqp::decode_method(frame.payload, returned) == amqp::MethodError::none) {
    // The broker routes a channel's publishes in order and sends a publish's basic.return
    // before its basic.ack, so a return belongs to the oldest publish in flight to that
    // exchange and routing key not returned yet; later ones with the same address may
    // still route (a binding added between them).
    for (auto& [seq, flight] : in_flight_) {
      if (!flight.returned && flight.exchange == returned.exchange &&
          flight.routing_key == returned.routing_key) {
        flight.returned = true;
        break;
      }
    }
  }
  skip_header_ = true;  // the returned message's content follows
}

void ProxyChannel::confirm(std::uint64_t tag, bool multiple, bool ack) {
  auto end = multiple ? in_flight_.upper_bound(tag) : in_flight_.find(tag);
  auto begin = multiple ? in_flight_.begin() : end;
  if (!multiple) {
    if (end == in_flight_.end()) return;
    ++end;
  }
  std::vector<InFlight> settled;
  for (auto it = begin; it != end; ++it) settled.push_back(std::move(it->second));
  in_flight_.erase(begin, end);
  for (InFlight& flight : settled) {
    if (!ack) {
      finish(std::move(flight.ticket), retry::FallbackCause::republish_failed,
             "the broker refused the copy (basic.nack)");
    } else if (flight.returned) {
      // The queue it was declared for is gone (deleted by hand): declare it again next time.
      if (!flight.ensured_queue.empty())
        queues_[flight.ensured_queue].status = QueueStatus::unknown;
      finish(std::move(flight.ticket), retry::FallbackCause::republish_failed,
             "the copy was unroutable: exchange \"" + flight.exchange + "\" has no binding for \"" +
                 flight.routing_key + "\"");
    } else {
      finish(std::move(flight.ticket), retry::FallbackCause::none, "");
    }
  }
}

void ProxyChannel::on_channel_closed(std::uint16_t code, const std::string& text,
                                     std::int64_t now_ms) {
  state_ = State::closed;
  skip_header_ = false;
  skip_content_ = 0;
  if (!declaring_.empty()) {
    QueueInfo& info = queues_[declaring_.front()];
    if (info.status == QueueStatus::passive_sent && code == kNotFound) {
      info.status = QueueStatus::active_needed;  // absent: declare it ourselves
      info.as_is = false;
    } else if (info.status == QueueStatus::active_sent && code == kPreconditionFailed &&
               !info.as_is) {
      // It exists with other arguments: use it as it is (a passive declare checks it exists).
      info.status = QueueStatus::unknown;
      info.as_is = true;
      info.failure = text;
    } else {
      info.status = QueueStatus::failed;
      info.failed_until_ms = now_ms + kDeclareRetryMs;
      info.failure = text;
    }
    declaring_.pop_front();
  }
  for (const std::string& name : declaring_) queues_[name].status = QueueStatus::unknown;
  declaring_.clear();
  std::map<std::uint64_t, InFlight> lost = std::move(in_flight_);
  in_flight_.clear();
  for (const auto& [seq, flight] : lost) {
    finish(std::move(flight.ticket), retry::FallbackCause::republish_failed,
           "the proxy's channel was closed: " + text);
  }
  pump(now_ms);
}

void ProxyChannel::on_tick(std::int64_t now_ms) {
  std::vector<Ticket> expired;
  for (auto it = in_flight_.begin(); it != in_flight_.end();) {
    if (now_ms >= it->second.deadline_ms) {
      expired.push_back(std::move(it->second.ticket));
      it = in_flight_.erase(it);
    } else {
      ++it;
    }
  }
  for (Ticket& ticket : expired)
    finish(std::move(ticket), retry::FallbackCause::republish_failed,
           "no publisher confirm in time");
  if (!expired.empty() && state_ == State::ready) pump(now_ms);
  while (!waiting_.empty() && now_ms >= waiting_.front().deadline_ms) {
    Ticket ticket = std::move(waiting_.front().ticket);
    waiting_.pop_front();
    finish(std::move(ticket), retry::FallbackCause::republish_failed,
           "the proxy's channel or queue declaration did not complete in time");
  }
}

void ProxyChannel::fail_all(const std::string& why) {
  std::deque<PublishRequest> waiting = std::move(waiting_);
  waiting_.clear();
  std::map<std::uint64_t, InFlight> in_flight = std::move(in_flight_);
  in_flight_.clear();
  for (const auto& request : waiting)
    finish(std::move(request.ticket), retry::FallbackCause::republish_failed, why);
  for (const auto& [seq, flight] : in_flight)
    finish(std::move(flight.ticket), retry::FallbackCause::republish_failed, why);
  state_ = State::closed;
}

}  // namespace nackguard::session
