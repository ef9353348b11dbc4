#pragma once
// Scripted connections through a real Session observed by a real Guard. The broker and the
// client are played by the test: frames are built with the codec's encoders and fed in, and
// what the session writes to each side is decoded back into frames. The clocks are variables
// the test advances; policies are built in code. A RecordingListener (guard_listener.hpp)
// records what the guard reported. The frames, messages and policies it uses are in
// guard_messages.hpp.

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
#include "proxy/guard/guard.hpp"
#include "proxy/retry/decision.hpp"
#include "proxy/retry/guard_context.hpp"
#include "proxy/retry/policy.hpp"
#include "proxy/retry/policy_set.hpp"
#include "proxy/session/session.hpp"
#include "session/guard_listener.hpp"
#include "session/guard_messages.hpp"
#include "session/script.hpp"

namespace nackguard::session::guard_test {

// ---- a connection through Session and Guard ----

// One client connection: the session and the guard observing it. Constructing it runs
// nothing; GuardTest::connect drives the handshake.
struct Connection {
  Connection(retry::GuardContext& context, SessionOptions options, std::uint64_t seed)
      : guard(context, seed), session(guarded(options, context), &guard) {}
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
    // The proxy cancels the gone client's consumer and waits for the cancel-ok; nothing taken
    // over holds the broker side open after it (client_eof_with_copy plays that).
    EXPECT_EQ(to_broker(), frames({cancel_consumer()}));
    broker(method(kCh, amqp::BasicCancelOk{kConsumer}));
    EXPECT_EQ(to_broker(), frames({gone_client_close()})) << "a copy holds the broker side";
    broker(method(0, amqp::ConnectionCloseOk{}));
    EXPECT_TRUE(conn->session.finished());
    conn->guard.on_connection_end();
    client_bytes();
    broker_bytes();
  }

  // The broker's side of the connection ends (a node going away); the guard is told once the
  // session is done, as the relay does.
  void connection_lost() {
    conn->session.on_eof(Side::broker);
    EXPECT_TRUE(conn->session.finished());
    conn->guard.on_connection_end();
    client_bytes();
    broker_bytes();
  }

  // The client's connection ends holding deliveries (broker tags `tags`) that the guard takes
  // over at the crash (session_core_end.cpp): the broker side stays open while the proxy cancels
  // the consumer, opens its channel, declares what it needs (answered here, and named in
  // `declared`), and publishes the copies; the broker confirms them, the proxy acks the
  // originals, and only then does the session end. Returns the copies, in publish order.
  std::vector<Copy> client_eof_with_copies(const std::vector<std::uint64_t>& tags,
                                           std::vector<std::string>* declared = nullptr) {
    conn->session.on_eof(Side::client);
    EXPECT_FALSE(conn->session.finished()) << "the broker side closed before the copies";
    std::vector<Wire> sent = crash_hold_start();
    std::vector<Copy> copies;
    while (copies.size() < tags.size()) {
      if (sent.empty()) sent = to_broker();
      if (sent.empty()) {
        ADD_FAILURE() << copies.size() << " copies of " << tags.size();
        break;
      }
      if (sent[0].is(mid::queue_declare)) {
        const std::string queue = as<amqp::QueueDeclare>(sent[0]).queue;
        if (declared) declared->push_back(queue);
        sent.erase(sent.begin());
        broker(declare_ok(queue));
        continue;
      }
      copies.push_back(take_copy(sent));
      sent.erase(sent.begin(), sent.begin() + static_cast<std::ptrdiff_t>(
                                                  std::min(copies.back().frames, sent.size())));
    }
    EXPECT_TRUE(sent.empty());
    confirm(tags.size(), true);
    Bytes acks;
    for (std::uint64_t tag : tags) acks = cat({acks, ack(kCh, tag)});
    // The acks, then the close that has the broker apply them before it ends the channels.
    EXPECT_EQ(to_broker(), decode_frames(cat({acks, gone_client_close()})));
    broker(method(0, amqp::ConnectionCloseOk{}));
    EXPECT_TRUE(conn->session.finished()) << "the session still waits after the acks";
    conn->guard.on_connection_end();
    client_bytes();
    broker_bytes();
    return copies;
  }
  // The same for one delivery; `declared`, if named, is the queue the proxy had to declare.
  Copy client_eof_with_copy(std::uint64_t tag, const std::string& declared = "") {
    std::vector<std::string> queues;
    std::vector<Copy> copies = client_eof_with_copies({tag}, &queues);
    if (!declared.empty()) {
      EXPECT_EQ(queues, std::vector<std::string>{declared});
    }
    return copies.empty() ? Copy{} : copies.front();
  }

  // The proxy holds a crashed client's connection for a copy: it cancels the client's consumer
  // and waits for the cancel-ok, then opens its channel if it must (played as open_proxy_channel
  // does). Returns what came next.
  std::vector<Wire> crash_hold_start() {
    std::vector<Wire> sent = to_broker();
    EXPECT_FALSE(sent.empty());
    if (sent.empty()) return sent;
    EXPECT_EQ(sent[0], frames({cancel_consumer()})[0]);
    sent.erase(sent.begin());
    broker(method(kCh, amqp::BasicCancelOk{kConsumer}));
    return past_proxy_channel_open(sent);
  }
  // The proxy's cancel of the consumer of a client that left (session_core_end.cpp).
  static Bytes cancel_consumer() { return method(kCh, amqp::BasicCancel{kConsumer, false}); }

  // What the proxy sent (`sent`), past the opening of its channel if that is what it starts
  // with (the broker's side played as open_proxy_channel does).
  std::vector<Wire> past_proxy_channel_open(std::vector<Wire> sent) {
    if (sent.empty() || !sent[0].is(mid::channel_open)) return sent;
    EXPECT_EQ(sent.size(), 1u);
    broker(method(kProxyChannel, amqp::ChannelOpenOk{}));
    EXPECT_EQ(to_broker(), frames({method(kProxyChannel, amqp::ConfirmSelect{})}));
    broker(method(kProxyChannel, amqp::ConfirmSelectOk{}));
    return to_broker();
  }

  // The message as the broker delivers it next, after the client gave it back.
  struct Next {
    Message message;
    bool redelivered = false;
  };
  // The client nacks `m`, delivered as broker tag `tag`, under the limit. Forwarded (the first
  // return since its copy: its redelivered flag carries it), it comes back redelivered;
  // republished with its count (the proxy's channel opened if needed, the copy confirmed as
  // publish `++*seq`, the original acked), it comes back as the copy, a new message.
  Next nack_under_the_limit(std::uint64_t tag, const Message& m, std::uint64_t* seq) {
    client(nack(kCh, tag));
    std::vector<Wire> sent = to_broker();
    if (sent == frames({nack(kCh, tag)})) return {m, true};
    const Copy copy = take_copy(past_proxy_channel_open(sent));
    EXPECT_EQ(copy.publish.routing_key, kQueue);
    confirm(++*seq);
    EXPECT_EQ(to_broker(), frames({ack(kCh, tag)}));
    return {delivered(m, copy), false};
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
  // Fresh messages "m<first>" to "m<last>", delivered as broker tags `first` to `last`, pass.
  void fresh_deliveries_pass(std::uint64_t first, std::uint64_t last) {
    for (std::uint64_t tag = first; tag <= last; ++tag) {
      deliver_passes(delivery(tag, message("m" + std::to_string(tag))));
    }
  }
  // The broker delivers `bytes`, a copy of nackguard's (a retry, which the broker delivers as
  // new): the client gets them as they are but for the redelivered bit of its method, set.
  void retry_passes(const Bytes& bytes) {
    broker(bytes);
    std::vector<Wire> expected = decode_frames(bytes);
    ASSERT_FALSE(expected.empty());
    amqp::BasicDeliver deliver = as<amqp::BasicDeliver>(expected[0]);
    deliver.redelivered = true;
    expected[0] = decode_frames(method(expected[0].channel, deliver))[0];
    EXPECT_EQ(to_client(), expected);
  }
  // The broker delivers `next` (broker tag `tag`), as nack_under_the_limit said it comes back.
  void next_passes(std::uint64_t tag, const Message& m, bool redelivered) {
    const Bytes bytes = delivery(tag, m, redelivered);
    const bool copy = m.properties.headers && m.properties.headers->find("x-nackguard-returns");
    if (copy && !redelivered) return retry_passes(bytes);
    deliver_passes(bytes);
  }

  // The client sends `bytes`; the broker is expected to get them as they are.
  void client_passes(const Bytes& bytes) {
    client(bytes);
    EXPECT_EQ(to_broker(), decode_frames(bytes));
  }

  // The first nack of m1 (broker tag 1) past max_redeliveries 0: its dead-letter is
  // published, not confirmed (publish sequence 1); what the proxy sent is taken.
  void dead_letter_in_flight() {
    start(policy(0));
    deliver_passes(delivery(1, message("m1")));
    client(nack(kCh, 1));
    open_proxy_channel();
    broker(declare_ok("q.dlq"));
    to_broker();
  }

  // dead_letter_in_flight, and the client is in the middle of a publish on channel kCh (3 of
  // 6 body bytes sent) when the confirm comes. The ack of the original waits for the
  // publish's last body frame, body_frame(kCh, "def").
  void dead_letter_confirmed_mid_publish() {
    dead_letter_in_flight();
    amqp::BasicPublish publish;
    publish.routing_key = "elsewhere";
    client_passes(cat({method(kCh, publish), content_header(kCh, 6, {}), body_frame(kCh, "abc")}));
    confirm(1);
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
