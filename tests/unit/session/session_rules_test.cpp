// The session's rules that are plain functions of a frame or a channel, without a Session: a
// content sequence (content_state.hpp), the ack-timeout rules (ack_timeout.hpp), the
// send-ahead's scan for a lone delivery (send_ahead.hpp), and what the handshake keeps
// (handshake.hpp). The byte-level session tests check the same through a whole Session.

#include <gtest/gtest.h>

#include "proxy/amqp/frame.hpp"
#include "proxy/session/ack_timeout.hpp"
#include "proxy/session/content_state.hpp"
#include "proxy/session/handshake.hpp"
#include "proxy/session/send_ahead.hpp"
#include "session/frame_builders.hpp"

namespace nackguard::session {
namespace {

using namespace test;  // frame_builders.hpp

TEST(ContentState, TakesAHeaderThenItsBodiesUpToTheAnnouncedSize) {
  ContentState state;
  const Bytes h = header(1, 5);
  const Bytes b1 = body(1, "abc");
  const Bytes b2 = body(1, "de");
  EXPECT_FALSE(state.take(only_frame(h)));  // no method before it
  state.phase = ContentState::Phase::awaiting_header;
  EXPECT_TRUE(state.take(only_frame(h)));
  EXPECT_EQ(state.remaining, 5u);
  EXPECT_TRUE(state.take(only_frame(b1)));
  EXPECT_FALSE(state.take(only_frame(body(1, "xyz"))));  // beyond the size: nothing changes
  EXPECT_EQ(state.remaining, 2u);
  EXPECT_TRUE(state.take(only_frame(b2)));
  EXPECT_FALSE(state.in_progress());
  EXPECT_FALSE(state.take(only_frame(b2)));  // a body after the sequence ended
}

TEST(ContentState, AnEmptyBodyEndsAtItsHeader) {
  ContentState state;
  state.phase = ContentState::Phase::awaiting_header;
  EXPECT_TRUE(state.take(only_frame(header(1, 0))));
  EXPECT_FALSE(state.in_progress());
}

TEST(AckTimeoutRules, TheCancelRequeuesFromRabbitMq43On) {
  EXPECT_FALSE(cancel_requeues(""));
  EXPECT_FALSE(cancel_requeues("3.10.8"));
  EXPECT_FALSE(cancel_requeues("4.0.5"));
  EXPECT_FALSE(cancel_requeues("4.2.9"));
  EXPECT_TRUE(cancel_requeues("4.3.6"));
  EXPECT_TRUE(cancel_requeues("4.3"));
  EXPECT_TRUE(cancel_requeues("5.0.0"));
  EXPECT_FALSE(cancel_requeues("x4.3"));
}

TEST(AckTimeoutRules, OnlyTheDeliveryThatTimedOutCountsAReturn) {
  ChannelState ch;
  Delivery timed_out;
  timed_out.broker_tag = 7;
  Delivery other;
  other.broker_tag = 8;
  EXPECT_EQ(end_cause(ch, timed_out, ReturnCause::channel_closed), ReturnCause::channel_closed);
  ch.ack_timed_out = true;
  ch.timed_out_broker_tag = 7;
  EXPECT_EQ(end_cause(ch, timed_out, ReturnCause::channel_closed), ReturnCause::consumer_timeout);
  EXPECT_EQ(end_cause(ch, other, ReturnCause::channel_closed), ReturnCause::broker_lost);
  timed_out.taken_over = true;  // the proxy's: its copy carries the count
  EXPECT_EQ(end_cause(ch, timed_out, ReturnCause::channel_closed), ReturnCause::broker_lost);
}

TEST(AckTimeoutRules, WhatEndsASidesPartOfTheProxysClose) {
  EXPECT_EQ(close_end(only_frame(method(3, amqp::ChannelCloseOk{}))), CloseEnd::close_ok);
  const amqp::ChannelClose close = channel_close_method(200);
  EXPECT_EQ(close_end(only_frame(method(3, close))), CloseEnd::crossed_close);
  EXPECT_EQ(close_end(only_frame(ack(3, 1))), CloseEnd::no);
  EXPECT_EQ(close_end(only_frame(body(3, "x"))), CloseEnd::no);
}

TEST(AckTimeoutRules, TheClientsCloseNamesTheDeliveryAndBothCloseTheChannel) {
  Delivery d;
  d.client_tag = 4;
  d.queue = "orders";
  const AckTimeoutClose frames = ack_timeout_close(2, d, 61000, 60000);
  amqp::ChannelClose to_client;
  ASSERT_EQ(amqp::decode_method(only_frame(frames.to_client).payload, to_client),
            amqp::MethodError::none);
  EXPECT_EQ(to_client.reply_code, 406);
  EXPECT_NE(to_client.reply_text.find("delivery tag 4 from queue 'orders' unacked for 61000 ms"),
            std::string::npos);
  amqp::ChannelClose to_broker;
  const amqp::Frame broker = only_frame(frames.to_broker);
  EXPECT_EQ(broker.channel, 2);
  ASSERT_EQ(amqp::decode_method(broker.payload, to_broker), amqp::MethodError::none);
  EXPECT_EQ(to_broker.reply_code, 200);
}

TEST(LoneDelivery, OneWholeDeliveryAndNothingElse) {
  amqp::FrameDecoder decoder(131072);
  const Bytes one = deliver(1, "ctag", 1, "hello");
  std::optional<LoneDelivery> lone = lone_delivery(decoder, one, std::nullopt);
  ASSERT_TRUE(lone);
  EXPECT_EQ(lone->size, one.size());
  EXPECT_EQ(lone->method.channel, 1);
  EXPECT_FALSE(lone_delivery(decoder, cat({one, deliver(1, "ctag", 2)}), std::nullopt));
  EXPECT_FALSE(lone_delivery(decoder, Bytes(one.begin(), one.end() - 1), std::nullopt));
  EXPECT_FALSE(lone_delivery(decoder, one, std::uint16_t{1}));  // the proxy's channel
  EXPECT_FALSE(lone_delivery(
      decoder, cat({method(1, deliver_method("ctag", 1)), header(1, 5), body(2, "hello")}),
      std::nullopt));  // its body on another channel
}

TEST(LoneDelivery, NotWithHeadersAGuardWouldRead) {
  amqp::FrameDecoder decoder(131072);
  amqp::BasicProperties properties;
  properties.headers = amqp::FieldTable{};
  properties.headers->set("x-death", amqp::FieldValue::string("x"));
  const Bytes with_headers =
      cat({method(1, deliver_method("ctag", 1)), header(1, 2, properties), body(1, "hi")});
  EXPECT_FALSE(lone_delivery(decoder, with_headers, std::nullopt));
}

TEST(HandshakeFacts, KeepsTheVersionTheClientsNameAndTheVhost) {
  Handshake handshake(131072);
  const HandshakeFrames f = handshake_frames({.vhost = "orders"}, amqp::ConnectionTune{});
  amqp::ConnectionStart start;
  start.server_properties.set("version", amqp::FieldValue::string("4.3.6"));
  handshake.broker_start(only_frame(method(0, start)));
  handshake.client_start_ok(only_frame(f.start_ok));
  EXPECT_TRUE(handshake.client_open(only_frame(f.open)));
  const ConnectionFacts facts = handshake.facts(4096);
  EXPECT_EQ(facts.broker_version, "4.3.6");
  EXPECT_EQ(facts.client_name, "test-client");
  EXPECT_EQ(facts.vhost, "orders");
  EXPECT_EQ(facts.frame_max, 4096u);
  EXPECT_FALSE(facts.reserved_channel);  // no tune-ok yet
}

TEST(HandshakeFacts, MalformedTuneOrOpenIsRefusedAndALongVersionCut) {
  Handshake handshake(131072);
  const Bytes short_tune = raw_method(0, 10, 30, Bytes{0, 1});
  EXPECT_FALSE(handshake.broker_tune(only_frame(short_tune)));
  EXPECT_FALSE(handshake.client_tune_ok(only_frame(raw_method(0, 10, 31, Bytes{0}))));
  EXPECT_FALSE(handshake.client_open(only_frame(raw_method(0, 10, 40))));
  amqp::ConnectionStart start;
  start.server_properties.set("version", amqp::FieldValue::string(std::string(100, '9')));
  handshake.broker_start(only_frame(method(0, start)));
  EXPECT_EQ(handshake.broker_version(), std::string(64, '9'));
}

}  // namespace
}  // namespace nackguard::session
