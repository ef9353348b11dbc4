#pragma once
// Scripted connections through a real Session observed by a real Guard. The broker and the
// client are played by the test: frames are built with the codec's encoders and fed in, and
// what the session writes to each side is decoded back into frames. The clocks are variables
// the test advances; policies are built in code. A GuardListener records what the
// guard reported.

#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "proxy/amqp/frame.hpp"
#include "proxy/amqp/method_codec.hpp"
#include "proxy/amqp/method_name.hpp"
#include "proxy/retry/decision.hpp"
#include "proxy/retry/guard_context.hpp"
#include "proxy/retry/policy.hpp"
#include "proxy/retry/policy_set.hpp"
#include "proxy/session/guard.hpp"
#include "proxy/session/session.hpp"
#include "session/script.hpp"

namespace nackguard::session::guard_test {

using amqp::Bytes;
using amqp::ByteView;
using amqp::FrameType;
namespace mid = amqp::mid;

inline constexpr std::int64_t kT0 = 1'700'000'000'000;  // the wall clock when a test starts
inline constexpr std::uint16_t kProxyChannel = 2047;    // the broker's channel_max
inline constexpr std::uint16_t kCh = 1;                 // the client's channel
inline constexpr const char* kQueue = "q";
inline constexpr const char* kConsumer = "c1";

// ---- frames ----
// Built and read with the session tests' own helpers (script.hpp), under the names these
// tests use.

using Wire = test::WireFrame;
using test::cat;
using test::decode_frames;
using test::frames;
using test::method;

// The frame decoded as method M; a frame that is not M fails the test.
template <typename M>
M as(const Wire& frame) {
  return test::decode_as<M>(frame);
}

inline Bytes content_header(std::uint16_t channel, std::uint64_t body_size,
                            const amqp::BasicProperties& properties) {
  return test::header(channel, body_size, properties);
}

inline Bytes body_frame(std::uint16_t channel, std::string_view data) {
  return test::body(channel, data);
}

inline Bytes ack(std::uint64_t tag, bool multiple = false, std::uint16_t channel = kCh) {
  return method(channel, amqp::BasicAck{tag, multiple});
}
inline Bytes nack(std::uint64_t tag, bool requeue = true, bool multiple = false,
                  std::uint16_t channel = kCh) {
  return method(channel, amqp::BasicNack{tag, multiple, requeue});
}
inline Bytes reject(std::uint64_t tag, bool requeue = true, std::uint16_t channel = kCh) {
  return method(channel, amqp::BasicReject{tag, requeue});
}
inline Bytes channel_close(std::uint16_t code, std::string text, std::uint16_t class_id = 0,
                           std::uint16_t method_id = 0, std::uint16_t channel = kProxyChannel) {
  amqp::ChannelClose close;
  close.reply_code = code;
  close.reply_text = std::move(text);
  close.class_id = class_id;
  close.method_id = method_id;
  return method(channel, close);
}
inline Bytes declare_ok(std::string queue, std::uint16_t channel = kProxyChannel) {
  return method(channel, amqp::QueueDeclareOk{std::move(queue), 0, 0});
}

// What the proxy declares: a passive check, or its own durable queue with `arguments`.
inline amqp::QueueDeclare passive_declare(std::string queue) {
  amqp::QueueDeclare d;
  d.queue = std::move(queue);
  d.passive = true;
  return d;
}
inline amqp::QueueDeclare durable_declare(std::string queue, amqp::FieldTable arguments = {}) {
  amqp::QueueDeclare d;
  d.queue = std::move(queue);
  d.durable = true;
  d.arguments = std::move(arguments);
  return d;
}
// The arguments of a delay queue with `ttl_ms` in front of queue "q".
inline amqp::FieldTable delay_arguments(std::int64_t ttl_ms) {
  amqp::FieldTable args;
  args.set("x-message-ttl", amqp::FieldValue::i64(ttl_ms));
  args.set("x-dead-letter-exchange", amqp::FieldValue::string(""));
  args.set("x-dead-letter-routing-key", amqp::FieldValue::string(kQueue));
  args.set("x-expires", amqp::FieldValue::i64(2 * ttl_ms + 60000));
  return args;
}

// ---- messages ----

struct Message {
  std::string id;
  std::string body;
  amqp::BasicProperties properties;
};

// A message with most properties set, a header table whose type letters must survive, and a
// body holding the frame-end octet and zeros.
inline Message message(const std::string& id, std::optional<std::int64_t> returns_header = {}) {
  Message m;
  m.id = id;
  m.body = std::string("body of ") + id + std::string("\0\xCE\x01\xFF", 4);
  amqp::BasicProperties& p = m.properties;
  p.content_type = "application/json";
  p.delivery_mode = 2;
  p.priority = 3;
  p.correlation_id = "corr-" + id;
  p.message_id = id;
  p.timestamp = 1690000000;
  p.app_id = "orders";
  amqp::FieldTable headers;
  headers.set("trace", amqp::FieldValue::string("t-" + id));
  headers.set("x-small", amqp::FieldValue::i16(7));
  if (returns_header) headers.set("x-nackguard-returns", amqp::FieldValue::i64(*returns_header));
  p.headers = std::move(headers);
  return m;
}

// The message as a quorum queue redelivers it: with x-delivery-count `count`.
inline Message with_delivery_count(Message m, std::int64_t count) {
  if (!m.properties.headers) m.properties.headers.emplace();
  m.properties.headers->set("x-delivery-count", amqp::FieldValue::i64(count));
  return m;
}

inline amqp::BasicProperties without_headers(amqp::BasicProperties p) {
  p.headers.reset();
  return p;
}

// basic.deliver, content header and body frames (of at most `chunk` bytes each).
inline Bytes delivery(std::uint64_t tag, const amqp::BasicProperties& properties,
                      std::string_view body, bool redelivered = false, std::string exchange = "ex",
                      std::string routing_key = "rk", std::size_t chunk = 1 << 16) {
  amqp::BasicDeliver d;
  d.consumer_tag = kConsumer;
  d.delivery_tag = tag;
  d.redelivered = redelivered;
  d.exchange = std::move(exchange);
  d.routing_key = std::move(routing_key);
  Bytes out = cat({method(kCh, d), content_header(kCh, body.size(), properties)});
  for (std::size_t at = 0; at < body.size(); at += chunk) {
    Bytes b = body_frame(kCh, body.substr(at, chunk));
    out.insert(out.end(), b.begin(), b.end());
  }
  return out;
}
inline Bytes delivery(std::uint64_t tag, const Message& m, bool redelivered = false) {
  return delivery(tag, m.properties, m.body, redelivered);
}

// A field value as its type letter and value, `absent` for none, so that a failed comparison
// reads as the header it is: l 3, S "ex", T 1700000001.
inline std::string text(const amqp::FieldValue* v) {
  if (!v) return "absent";
  std::string out(1, v->type);
  if (const std::string* s = v->as_string()) return out + " \"" + *s + "\"";
  if (const auto* t = std::get_if<std::uint64_t>(&v->value)) return out + " " + std::to_string(*t);
  if (auto n = v->as_int()) return out + " " + std::to_string(*n);
  return out + " (not shown)";
}
inline std::string text(const amqp::FieldValue& v) {
  return text(&v);
}

// A copy the proxy published: its method, header and the body of its body frames.
struct Copy {
  amqp::BasicPublish publish;
  amqp::ContentHeader header;
  Bytes body;
  std::size_t frames = 0;  // method, header and body frames

  const amqp::FieldValue* header_value(std::string_view name) const {
    return header.properties.headers ? header.properties.headers->find(name) : nullptr;
  }
  // The header `name` of the copy, as text().
  std::string header_text(std::string_view name) const { return text(header_value(name)); }
};

// The publish starting at frames[at], all of it on the proxy's channel.
inline Copy take_copy(const std::vector<Wire>& frames, std::size_t at = 0) {
  Copy copy;
  if (frames.size() < at + 2 || !frames[at].is(mid::basic_publish)) {
    ADD_FAILURE() << "no basic.publish at frame " << at << " of " << frames.size();
    return copy;
  }
  copy.publish = as<amqp::BasicPublish>(frames[at]);
  EXPECT_EQ(frames[at].channel, kProxyChannel);
  const Wire& header = frames[at + 1];
  EXPECT_EQ(header.type, static_cast<std::uint8_t>(FrameType::header));
  EXPECT_EQ(header.channel, kProxyChannel);
  EXPECT_EQ(amqp::decode_content_header(header.payload, copy.header), amqp::HeaderError::none);
  std::size_t i = at + 2;
  while (copy.body.size() < copy.header.body_size && i < frames.size() &&
         frames[i].type == static_cast<std::uint8_t>(FrameType::body)) {
    EXPECT_EQ(frames[i].channel, kProxyChannel);
    copy.body.insert(copy.body.end(), frames[i].payload.begin(), frames[i].payload.end());
    ++i;
  }
  EXPECT_EQ(copy.body.size(), copy.header.body_size);
  copy.frames = i - at;
  return copy;
}

inline Bytes bytes_of(std::string_view text) {
  ByteView view = amqp::as_bytes(text);
  return Bytes(view.begin(), view.end());
}

// ---- policies ----

// A policy for queue "q" that forwards every return up to `max_redeliveries`, never sees an
// outage, never rate-limits, and identifies messages by message_id.
inline retry::Policy policy(std::uint32_t max_redeliveries) {
  retry::Policy p;
  p.queue = kQueue;
  p.max_redeliveries = max_redeliveries;
  p.identity = {{retry::IdentitySource::Kind::message_id, ""}};
  p.requeue = retry::RequeueMode::immediate;
  p.backoff.initial = retry::Millis(1000);
  p.backoff.multiplier = 2.0;
  p.backoff.jitter = retry::Backoff::Jitter::none;
  p.rate.per_message = 1000;
  p.rate.min_messages = 1000000;
  return p;
}

// ---- what the guard reported ----

class RecordingListener : public retry::GuardListener {
 public:
  struct DeadLettered {
    std::string queue;
    std::string identity;
    std::uint32_t returns = 0;
    retry::DeadLetterReason reason = retry::DeadLetterReason::none;
    bool operator==(const DeadLettered&) const = default;
  };
  struct Fallback {
    std::string queue;
    std::string cause;
    std::string detail;
  };
  struct Outage {
    std::string queue;
    bool started = false;
    double ratio = 0.0;
  };

  int deliveries = 0;
  int returns = 0;
  int ack_timeouts = 0;
  std::vector<retry::Action> requeues;
  std::vector<DeadLettered> dead_letters;
  std::vector<Fallback> fallbacks;
  std::vector<Outage> outages;

  void on_delivery(std::string_view) override { ++deliveries; }
  void on_return(std::string_view) override { ++returns; }
  void on_ack_timeout(std::string_view, std::string_view, std::int64_t) override { ++ack_timeouts; }
  void on_requeue(std::string_view queue, retry::Action action) override {
    EXPECT_EQ(queue, kQueue);
    requeues.push_back(action);
  }
  void on_dead_letter(std::string_view queue, std::string_view identity, std::uint32_t count,
                      retry::DeadLetterReason reason) override {
    dead_letters.push_back({std::string(queue), std::string(identity), count, reason});
  }
  void on_fallback(std::string_view queue, std::string_view cause,
                   std::string_view detail) override {
    fallbacks.push_back({std::string(queue), std::string(cause), std::string(detail)});
  }
  void on_outage(std::string_view queue, bool started, double ratio) override {
    outages.push_back({std::string(queue), started, ratio});
  }
};

inline void PrintTo(const RecordingListener::DeadLettered& d, std::ostream* os) {
  *os << "{" << d.queue << ", " << d.identity << ", " << d.returns << ", "
      << retry::to_string(d.reason) << "}";
}

// ---- a connection through Session and Guard ----

// One client connection: the session and the guard observing it. Constructing it runs
// nothing; GuardTest::connect drives the handshake.
struct Connection {
  Connection(retry::GuardContext& context, SessionOptions options, std::uint64_t seed)
      : guard(context, seed), session(options, &guard) {}
  Guard guard;
  Session session;
};

class GuardTest : public ::testing::Test {
 protected:
  // A shared context with `p` as the only policy, and a first connection.
  void start(const retry::Policy& p, retry::GuardSettings settings = {},
             bool sessions_use_budget = false) {
    context = std::make_unique<retry::GuardContext>(
        settings, std::make_shared<const retry::PolicySet>(std::vector<retry::Policy>{p}),
        &listener, retry::GuardClocks{[this] { return now; }, [this] { return now + wall_step; }});
    if (sessions_use_budget) options.body_budget = &context->budget();
    connect();
  }

  // A new connection on the same context: handshake (by default the broker offers
  // channel_max 2047 and frame_max 131072, which the client takes), channel 1 open, and
  // consumer "c1" on queue "q". Outputs are left empty.
  void connect(std::uint16_t channel_max = kProxyChannel, std::uint32_t frame_max = 131072) {
    conn = std::make_unique<Connection>(*context, options, ++seed_);
    Bytes header(std::begin(amqp::kProtocolHeader), std::end(amqp::kProtocolHeader));
    client(header);
    EXPECT_EQ(broker_bytes(), header);

    amqp::ConnectionStart start;
    start.server_properties.set("product", amqp::FieldValue::string("RabbitMQ"));
    if (!broker_version.empty()) {
      start.server_properties.set("version", amqp::FieldValue::string(broker_version));
    }
    start.mechanisms = "PLAIN";
    start.locales = "en_US";
    broker(method(0, start));
    amqp::ConnectionStartOk start_ok;
    start_ok.client_properties = client_properties;
    start_ok.mechanism = "PLAIN";
    start_ok.response = std::string("\0guest\0guest", 12);
    start_ok.locale = "en_US";
    client(method(0, start_ok));

    broker(method(0, amqp::ConnectionTune{channel_max, frame_max, 60}));
    // The client is offered one channel less: the top one is the proxy's (with one channel
    // there is none to spare).
    const bool reserved = channel_max >= 2;
    const auto offered = static_cast<std::uint16_t>(reserved ? channel_max - 1 : channel_max);
    EXPECT_EQ(to_client(),
              frames({method(0, start), method(0, amqp::ConnectionTune{offered, frame_max, 60})}));
    client(method(0, amqp::ConnectionTuneOk{{offered, frame_max, 60}}));
    amqp::ConnectionOpen open;
    open.virtual_host = "/";
    client(method(0, open));
    std::vector<Wire> to_broker_frames = to_broker();
    EXPECT_EQ(
        to_broker_frames,
        frames({method(0, start_ok),
                method(0, amqp::ConnectionTuneOk{{channel_max, frame_max, 60}}), method(0, open)}));
    broker(method(0, amqp::ConnectionOpenOk{}));
    EXPECT_TRUE(conn->session.is_open());
    EXPECT_EQ(conn->session.reserved_channel(),
              reserved ? std::optional<std::uint16_t>(channel_max) : std::nullopt);
    open_and_consume();
  }

  // The client opens channel kCh and consumes kQueue as kConsumer (again, after a close).
  void open_and_consume() {
    client(method(kCh, amqp::ChannelOpen{}));
    broker(method(kCh, amqp::ChannelOpenOk{}));
    amqp::BasicConsume consume;
    consume.queue = kQueue;
    consume.consumer_tag = kConsumer;
    client(method(kCh, consume));
    broker(method(kCh, amqp::BasicConsumeOk{kConsumer}));
    client_bytes();
    broker_bytes();
  }

  // The client's TCP connection ends; the guard is told, as the relay does.
  void client_eof() {
    conn->session.on_eof(Side::client);
    conn->guard.on_connection_end();
    client_bytes();
    broker_bytes();
  }

  void client(const Bytes& bytes) { conn->session.feed(Side::client, bytes); }
  void broker(const Bytes& bytes) { conn->session.feed(Side::broker, bytes); }

  Bytes client_bytes() {
    Bytes out;
    out.swap(conn->session.output(Side::client));
    return out;
  }
  Bytes broker_bytes() {
    Bytes out;
    out.swap(conn->session.output(Side::broker));
    return out;
  }
  std::vector<Wire> to_client() { return decode_frames(client_bytes()); }
  std::vector<Wire> to_broker() { return decode_frames(broker_bytes()); }

  // The broker delivers `bytes`; the client is expected to get them as they are (compared
  // frame by frame, so that a difference prints as frames).
  void deliver_passes(const Bytes& bytes) {
    broker(bytes);
    EXPECT_EQ(to_client(), decode_frames(bytes));
  }
  // The client sends `bytes`; the broker is expected to get them as they are.
  void client_passes(const Bytes& bytes) {
    client(bytes);
    EXPECT_EQ(to_broker(), decode_frames(bytes));
  }

  // Plays the broker's side of opening the proxy's channel: checks that the proxy asked for
  // channel.open and then confirm.select, answers both, and returns what it sent next.
  std::vector<Wire> open_proxy_channel() {
    EXPECT_EQ(to_broker(), frames({method(kProxyChannel, amqp::ChannelOpen{})}));
    broker(method(kProxyChannel, amqp::ChannelOpenOk{}));
    EXPECT_EQ(to_broker(), frames({method(kProxyChannel, amqp::ConfirmSelect{})}));
    broker(method(kProxyChannel, amqp::ConfirmSelectOk{}));
    return to_broker();
  }

  // `m` is delivered again (broker tag `tag`, redelivered) on the first channel and is
  // taken over to be dead-lettered: the proxy opens its channel, declares q.dlq, and publishes
  // the copy, which is returned (not yet confirmed).
  Copy dead_letter_at_next_delivery(std::uint64_t tag, const Message& m) {
    broker(delivery(tag, m, true));
    EXPECT_TRUE(to_client().empty());
    EXPECT_EQ(open_proxy_channel(), frames({method(kProxyChannel, passive_declare("q.dlq"))}));
    broker(declare_ok("q.dlq"));
    return take_copy(to_broker());
  }

  // After the broker closed the proxy's channel: checks that the proxy answered close-ok and
  // opened it again, plays the open as open_proxy_channel does, and returns what came next.
  std::vector<Wire> reopen_proxy_channel() {
    EXPECT_EQ(to_broker(), frames({method(kProxyChannel, amqp::ChannelCloseOk{}),
                                   method(kProxyChannel, amqp::ChannelOpen{})}));
    broker(method(kProxyChannel, amqp::ChannelOpenOk{}));
    EXPECT_EQ(to_broker(), frames({method(kProxyChannel, amqp::ConfirmSelect{})}));
    broker(method(kProxyChannel, amqp::ConfirmSelectOk{}));
    return to_broker();
  }

  // The proxy's confirm of publish `seq`.
  void confirm(std::uint64_t seq, bool multiple = false) {
    broker(method(kProxyChannel, amqp::BasicAck{seq, multiple}));
  }
  void refuse(std::uint64_t seq, bool multiple = false) {
    broker(method(kProxyChannel, amqp::BasicNack{seq, multiple, false}));
  }

  std::optional<retry::TrackerEntry> tracked(const std::string& id) {
    return context->tracker().find(retry::make_key(kQueue, "message_id:" + id), now);
  }

  // Time as the guard reads it: `now` is the time passed (both clocks follow it), `wall_step`
  // a step of the wall clock alone (NTP): the wall clock reads now + wall_step.
  std::int64_t now = kT0;
  std::int64_t wall_step = 0;
  std::string broker_version;  // the "version" server property connect() sends, if any
  // The client properties of the start-ok connect() sends (x-nackguard-consumer's source).
  amqp::FieldTable client_properties = [] {
    amqp::FieldTable table;
    table.set("product", amqp::FieldValue::string("test-client"));
    table.set("version", amqp::FieldValue::string("1.0"));
    return table;
  }();
  RecordingListener listener;
  SessionOptions options;
  std::unique_ptr<retry::GuardContext> context;
  std::unique_ptr<Connection> conn;

 private:
  std::uint64_t seed_ = 0;
};

}  // namespace nackguard::session::guard_test
