// Frames the proxy injects go out at the next frame boundary outside any content sequence in
// that direction, and never split one.

#include <gtest/gtest.h>

#include "session/script.hpp"

namespace nackguard::session::test {
namespace {

class SessionInjection : public ::testing::Test {
 protected:
  void SetUp() override {
    handshake(link);
    publish.exchange = "ex";
    publish.routing_key = "rk";
  }
  // A frame the proxy sends on its own channel.
  Bytes proxy_frame(std::uint32_t n) {
    amqp::QueueDeclare declare;
    declare.queue = "proxy-" + std::to_string(n);
    return method(2047, declare);
  }

  Link link;
  amqp::BasicPublish publish;
};

TEST_F(SessionInjection, ToTheBrokerWhenIdleGoesOutAtOnce) {
  link.session.inject(Side::broker, proxy_frame(1));
  EXPECT_EQ(link.broker_bytes(), proxy_frame(1));
  EXPECT_TRUE(link.client_bytes().empty());
}

TEST_F(SessionInjection, ToTheClientWhenIdleGoesOutAtOnce) {
  Bytes hb = heartbeat();
  link.session.inject(Side::client, hb);
  EXPECT_EQ(link.client_bytes(), hb);
  EXPECT_TRUE(link.broker_bytes().empty());
}

TEST_F(SessionInjection, ToTheBrokerWaitsForTheLastBodyFrameOfAPublish) {
  Bytes start = cat({method(2, publish), header(2, 9), body(2, "abc")});
  link.client(start);
  EXPECT_EQ(link.broker_bytes(), start);
  link.session.inject(Side::broker, proxy_frame(1));
  link.session.inject(Side::broker, proxy_frame(2));
  EXPECT_TRUE(link.broker_bytes().empty());
  // Frames of other channels and heartbeats pass; the injection still waits.
  Bytes other = cat({method(1, amqp::ChannelOpen{}), heartbeat(), body(2, "def")});
  link.client(other);
  EXPECT_EQ(link.broker_bytes(), other);
  Bytes last = body(2, "ghi");
  link.client(last);
  EXPECT_EQ(link.broker_bytes(), cat({last, proxy_frame(1), proxy_frame(2)}));
}

TEST_F(SessionInjection, ToTheBrokerWaitsWhileTheHeaderIsAwaited) {
  link.client(method(2, publish));
  link.broker_bytes();
  link.session.inject(Side::broker, proxy_frame(1));
  EXPECT_TRUE(link.broker_bytes().empty());
  Bytes empty_content = header(2, 0);  // ends the content sequence by itself
  link.client(empty_content);
  EXPECT_EQ(link.broker_bytes(), cat({empty_content, proxy_frame(1)}));
}

TEST_F(SessionInjection, ToTheBrokerWaitsForEveryChannelsPublish) {
  link.client(cat({method(1, publish), header(1, 1), method(2, publish), header(2, 1)}));
  link.broker_bytes();
  link.session.inject(Side::broker, proxy_frame(1));
  link.client(body(1, "x"));
  EXPECT_EQ(link.broker_bytes(), body(1, "x"));
  link.client(body(2, "y"));
  EXPECT_EQ(link.broker_bytes(), cat({body(2, "y"), proxy_frame(1)}));
}

TEST_F(SessionInjection, WhenFedInOneReadTheInjectionLandsRightAfterTheContent) {
  link.client(cat({method(2, publish), header(2, 2)}));
  link.broker_bytes();
  link.session.inject(Side::broker, proxy_frame(1));
  Bytes tail = cat({body(2, "ok"), method(1, amqp::ChannelOpen{})});
  link.client(tail);
  EXPECT_EQ(link.to_broker(),
            frames({body(2, "ok"), proxy_frame(1), method(1, amqp::ChannelOpen{})}));
}

TEST_F(SessionInjection, ToTheClientWaitsForTheLastBodyFrameOfADelivery) {
  Bytes start = cat({method(1, deliver_method("c1", 1)), header(1, 6), body(1, "abc")});
  link.broker(start);
  EXPECT_EQ(link.client_bytes(), start);
  Bytes hb = heartbeat();
  link.session.inject(Side::client, hb);
  EXPECT_TRUE(link.client_bytes().empty());
  Bytes last = body(1, "def");
  link.broker(last);
  EXPECT_EQ(link.client_bytes(), cat({last, hb}));
}

TEST_F(SessionInjection, ToTheClientWaitsForTheLastBodyFrameOfAReturn) {
  amqp::BasicReturn ret;
  ret.reply_code = 312;
  ret.reply_text = "NO_ROUTE";
  Bytes start = cat({method(1, ret)});
  link.broker(start);
  EXPECT_EQ(link.client_bytes(), start);
  link.session.inject(Side::client, heartbeat());
  EXPECT_TRUE(link.client_bytes().empty());
  Bytes rest = content(1, "back");
  link.broker(rest);
  EXPECT_EQ(link.client_bytes(), cat({rest, heartbeat()}));
}

TEST_F(SessionInjection, ToTheClientBeforeAHeldDeliverMethodGoesOutAtOnce) {
  // The deliver method is held for its header: the client has seen nothing of it yet.
  Bytes method_frame = method(1, deliver_method("c1", 1));
  link.broker(method_frame);
  link.session.inject(Side::client, heartbeat());
  EXPECT_EQ(link.client_bytes(), heartbeat());
  Bytes rest = content(1, "x");
  link.broker(rest);
  EXPECT_EQ(link.client_bytes(), cat({method_frame, rest}));
}

TEST_F(SessionInjection, ToTheClientDuringATakenOverDeliveryGoesOutAtOnce) {
  link.observer.take_over_at_delivery = {{1, 1}};
  link.broker(cat({method(1, deliver_method("c1", 1)), header(1, 6), body(1, "abc")}));
  EXPECT_TRUE(link.client_bytes().empty());
  link.session.inject(Side::client, heartbeat());
  EXPECT_EQ(link.client_bytes(), heartbeat());
  link.broker(body(1, "def"));
  EXPECT_TRUE(link.client_bytes().empty());
}

TEST_F(SessionInjection, NothingIsInjectedOnceTheSessionIsClosing) {
  link.session.on_eof(Side::client);
  link.session.inject(Side::broker, proxy_frame(1));
  link.session.inject(Side::client, heartbeat());
  EXPECT_EQ(link.broker_bytes(), gone_client_close());  // nothing after it
  EXPECT_TRUE(link.client_bytes().empty());
}

}  // namespace
}  // namespace nackguard::session::test
