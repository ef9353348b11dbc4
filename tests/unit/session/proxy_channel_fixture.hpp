#pragma once
// The proxy's own channel alone, for its tests: broker frames in through on_frame (feed); what
// each call produced (take_output) is moved after it into `sent` (take_sent), `done` (each
// publish's one outcome: take_done) and `notices`.

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "proxy/session/proxy_channel.hpp"
#include "session/guard_script.hpp"

namespace nackguard::session::guard_test {

// One `done` call: failure none for a confirmed copy.
struct Done {
  std::uint64_t job = 0;
  retry::FallbackCause failure = retry::FallbackCause::none;
  std::string why;
  bool operator==(const Done&) const = default;
};

inline void PrintTo(const Done& d, std::ostream* os) {
  *os << "{job " << d.job << ", " << retry::to_string(d.failure) << (d.why.empty() ? "" : ": ")
      << d.why << "}";
}

inline Done ok(std::uint64_t job) {
  return {job, retry::FallbackCause::none, ""};
}

inline Done failed(std::uint64_t job, std::string why,
                   retry::FallbackCause failure = retry::FallbackCause::republish_failed) {
  return {job, failure, std::move(why)};
}

class ProxyChannelTest : public ::testing::Test {
 protected:
  ProxyChannelTest() { channel.configure(kProxyChannel, 131072); }

  // A request for `job`, its body `body`, to the default exchange and queue `queue`, which
  // the channel is to declare itself (arguments: one TTL).
  PublishRequest request(std::uint64_t job, const std::string& queue = "dq",
                         std::string_view body = "copy") {
    PublishRequest r;
    r.ticket.job = job;
    r.exchange = "";
    r.routing_key = queue;
    QueueSpec spec;
    spec.name = queue;
    spec.arguments.set("x-message-ttl", amqp::FieldValue::i64(1000));
    r.ensure = std::move(spec);
    r.header.properties.message_id = "m" + std::to_string(job);
    r.body = retry::RetainedBody::make(nullptr, body.size());
    ByteView view = amqp::as_bytes(body);
    r.body->bytes.assign(view.begin(), view.end());
    r.deadline_ms = now + 30000;
    return r;
  }
  // A request for `job` to queue "q.dlq" as a policy's use_existing names it: the channel
  // checks it with a passive declare, and declares its own (no arguments) only if it is absent.
  PublishRequest existing_dlq_request(std::uint64_t job) {
    PublishRequest r = request(job, "q.dlq");
    r.ensure->use_existing = true;
    r.ensure->arguments = {};
    return r;
  }
  // A request to exchange "x" with routing key `key`, nothing to declare.
  PublishRequest to_exchange(std::uint64_t job, const std::string& key) {
    PublishRequest r = request(job);
    r.ensure.reset();
    r.exchange = "x";
    r.routing_key = key;
    return r;
  }

  void publish(PublishRequest r) {
    channel.publish(std::move(r), now);
    collect();
  }
  void tick(std::int64_t at) {
    channel.on_tick(at);
    collect();
  }
  void fail_all(const std::string& why) {
    channel.fail_all(why);
    collect();
  }
  // Moves what the channel produced into `sent`, `done` and `notices`.
  void collect() {
    ProxyChannel::Output out = channel.take_output();
    sent.insert(sent.end(), out.frames.begin(), out.frames.end());
    for (const Outcome& o : out.outcomes) done.push_back({o.ticket.job, o.failure, o.why});
    for (const QueueNotice& n : out.notices) notices.emplace_back(n.queue, n.why);
  }
  // Every frame of `bytes` through on_frame, at the current time.
  void feed(const Bytes& bytes) {
    amqp::FrameDecoder decoder(1u << 30);
    ByteView rest(bytes);
    while (!rest.empty()) {
      amqp::FrameResult r = decoder.decode(rest);
      ASSERT_EQ(r.status, amqp::FrameResult::Status::frame);
      channel.on_frame(r.frame, now);
      collect();
      rest = rest.subspan(r.frame.raw.size());
    }
  }
  std::vector<Wire> take_sent() {
    std::vector<Wire> out = decode_frames(sent);
    sent.clear();
    return out;
  }
  std::vector<Done> take_done() {
    std::vector<Done> out;
    out.swap(done);
    return out;
  }
  // Answers channel.open and confirm.select, checking that both were asked for.
  void open() {
    EXPECT_EQ(take_sent(), frames({method(kProxyChannel, amqp::ChannelOpen{})}));
    feed(method(kProxyChannel, amqp::ChannelOpenOk{}));
    EXPECT_EQ(take_sent(), frames({method(kProxyChannel, amqp::ConfirmSelect{})}));
    feed(method(kProxyChannel, amqp::ConfirmSelectOk{}));
  }
  // The frames of publishing `r` as publish-sequence-independent bytes.
  static Bytes publish_frames(const PublishRequest& r, std::uint32_t frame_max = 131072) {
    amqp::BasicPublish p;
    p.exchange = r.exchange;
    p.routing_key = r.routing_key;
    p.mandatory = true;
    amqp::ContentHeader h = r.header;
    h.body_size = r.body->bytes.size();
    Bytes out = method(kProxyChannel, p);
    EXPECT_TRUE(amqp::append_content_header_frame(out, kProxyChannel, h));
    const std::size_t chunk = frame_max - amqp::kFrameOverhead;
    const Bytes& body = r.body->bytes;
    for (std::size_t at = 0; at < body.size(); at += chunk) {
      amqp::append_frame(out, FrameType::body, kProxyChannel,
                         ByteView(body).subspan(at, std::min(chunk, body.size() - at)));
    }
    return out;
  }
  static Bytes declare(const PublishRequest& r) {
    return method(kProxyChannel, durable_declare(r.ensure->name, r.ensure->arguments));
  }

  std::int64_t now = kT0;
  Bytes sent;
  std::vector<Done> done;
  std::vector<std::pair<std::string, std::string>> notices;
  ProxyChannel channel;
};

}  // namespace nackguard::session::guard_test
