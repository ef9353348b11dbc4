// Delivery tracking: what the observer learns of each delivery, from consumers, gets and
// declared queues.

#include <gtest/gtest.h>

#include "session/tracking_fixture.hpp"

namespace nackguard::session::test {
namespace {

TEST_F(SessionTracking, DeliveryCarriesEverythingTheObserverNeeds) {
  consume(1, "orders", "c1");
  link.observer.take_events();
  amqp::BasicProperties props;
  props.content_type = "text/plain";
  props.correlation_id = "corr-7";
  amqp::FieldTable headers;
  headers.set("x-death-count", amqp::FieldValue::i64(3));
  props.headers = headers;
  Bytes frames_in = cat({method(1, deliver_method("c1", 1, true, "orders-ex", "orders.eu")),
                         content(1, "hello world", props, 4)});
  broker_passes(frames_in);

  ASSERT_EQ(link.observer.deliveries.size(), 1u);
  const Delivery& d = link.observer.deliveries[0];
  EXPECT_EQ(d.channel, 1);
  EXPECT_EQ(d.broker_tag, 1u);
  EXPECT_EQ(d.client_tag, 0u);  // decided after the observer answers
  EXPECT_EQ(d.consumer_tag, "c1");
  EXPECT_EQ(d.queue, "orders");
  EXPECT_EQ(d.exchange, "orders-ex");
  EXPECT_EQ(d.routing_key, "orders.eu");
  EXPECT_TRUE(d.redelivered);
  EXPECT_FALSE(d.no_ack);
  EXPECT_FALSE(d.from_get);
  EXPECT_FALSE(d.taken_over);
  EXPECT_EQ(d.body_size, 11u);
  amqp::ContentHeader h;
  ASSERT_TRUE(d.decode_header(h));
  EXPECT_EQ(h.body_size, 11u);
  EXPECT_EQ(h.properties, props);
  EXPECT_EQ(link.session.channel(1)->unacked_count(), 1u);
  EXPECT_EQ(link.observer.take_events(), Events{"delivery ch1 b1"});
}

TEST_F(SessionTracking, ConsumeWithoutWaitIsKnownAtOnce) {
  client_passes(method(1, consume_method("fast", "c9", false, true)));
  deliveries(1, "c9", 1, 1);
  ASSERT_EQ(link.observer.deliveries.size(), 1u);
  EXPECT_EQ(link.observer.deliveries[0].queue, "fast");
  EXPECT_EQ(link.observer.deliveries[0].consumer_tag, "c9");
}

TEST_F(SessionTracking, ServerGeneratedConsumerTagIsLearntFromConsumeOk) {
  consume(1, "orders", "", false, "amq.ctag-Xy1");
  deliveries(1, "amq.ctag-Xy1", 1, 1);
  ASSERT_EQ(link.observer.deliveries.size(), 1u);
  EXPECT_EQ(link.observer.deliveries[0].queue, "orders");
  EXPECT_EQ(link.observer.deliveries[0].consumer_tag, "amq.ctag-Xy1");
}

TEST_F(SessionTracking, PipelinedConsumesAreMatchedInOrder) {
  link.client(method(1, consume_method("first", "")));
  link.client(method(1, consume_method("second", "named")));
  link.broker(method(1, amqp::BasicConsumeOk{"amq.ctag-1"}));
  link.broker(method(1, amqp::BasicConsumeOk{"named"}));
  drain();
  link.broker(deliver(1, "named", 1));
  link.broker(deliver(1, "amq.ctag-1", 2));
  ASSERT_EQ(link.observer.deliveries.size(), 2u);
  EXPECT_EQ(link.observer.deliveries[0].queue, "second");
  EXPECT_EQ(link.observer.deliveries[1].queue, "first");
}

TEST_F(SessionTracking, EmptyQueueNameIsTheQueueLastDeclared) {
  amqp::QueueDeclare declare;  // server-named
  client_passes(method(1, declare));
  amqp::QueueDeclareOk declare_ok;
  declare_ok.queue = "amq.gen-JzTY20BRgKO";
  broker_passes(method(1, declare_ok));
  consume(1, "", "c1");
  client_passes(method(1, get_method("")));
  deliveries(1, "c1", 1, 1);
  link.broker(cat({method(1, get_ok_method(2)), content(1, "g")}));
  ASSERT_EQ(link.observer.deliveries.size(), 2u);
  EXPECT_EQ(link.observer.deliveries[0].queue, "amq.gen-JzTY20BRgKO");
  EXPECT_EQ(link.observer.deliveries[1].queue, "amq.gen-JzTY20BRgKO");
}

TEST_F(SessionTracking, DeclareWithoutWaitNamesTheQueueAtOnce) {
  amqp::QueueDeclare declare;
  declare.queue = "named";
  declare.no_wait = true;
  client_passes(method(2, declare));
  client_passes(method(2, consume_method("", "c2", false, true)));
  deliveries(2, "c2", 1, 1);
  ASSERT_EQ(link.observer.deliveries.size(), 1u);
  EXPECT_EQ(link.observer.deliveries[0].queue, "named");
}

TEST_F(SessionTracking, NoAckDeliveriesAreSeenButNotTracked) {
  consume(1, "events", "c1", true);
  deliveries(1, "c1", 1, 3);
  ASSERT_EQ(link.observer.deliveries.size(), 3u);
  EXPECT_TRUE(link.observer.deliveries[0].no_ack);
  EXPECT_EQ(link.session.channel(1)->unacked_count(), 0u);
  link.observer.take_events();
  link.session.on_eof(Side::client);
  EXPECT_EQ(link.observer.take_events(), Events{});
}

TEST_F(SessionTracking, GetsAreAttributedInOrderAcrossGetEmpty) {
  client_passes(method(1, get_method("q1")));
  client_passes(method(1, get_method("q2")));
  client_passes(method(1, get_method("q3", true)));
  broker_passes(method(1, amqp::BasicGetEmpty{}));  // answers q1
  link.broker(cat({method(1, get_ok_method(1)), content(1, "from q2")}));
  link.broker(cat({method(1, get_ok_method(2)), content(1, "from q3")}));
  ASSERT_EQ(link.observer.deliveries.size(), 2u);
  const Delivery& d = link.observer.deliveries[0];
  EXPECT_EQ(d.queue, "q2");
  EXPECT_TRUE(d.from_get);
  EXPECT_EQ(d.consumer_tag, "");
  EXPECT_FALSE(d.no_ack);
  EXPECT_EQ(link.observer.deliveries[1].queue, "q3");
  EXPECT_TRUE(link.observer.deliveries[1].no_ack);
  EXPECT_EQ(link.session.channel(1)->unacked_count(), 1u);
}

TEST_F(SessionTracking, CancelledConsumerTagCanBeReusedForAnotherQueue) {
  consume(1, "first", "c1");
  client_passes(method(1, amqp::BasicCancel{"c1", false}));
  broker_passes(method(1, amqp::BasicCancelOk{{"c1"}}));
  consume(1, "second", "c1");
  deliveries(1, "c1", 1, 1);
  ASSERT_EQ(link.observer.deliveries.size(), 1u);
  EXPECT_EQ(link.observer.deliveries[0].queue, "second");
}

TEST_F(SessionTracking, BrokerCancelledConsumerTagCanBeReused) {
  consume(1, "first", "c1");
  broker_passes(method(1, amqp::BasicCancel{"c1", true}));  // consumer_cancel_notify
  consume(1, "second", "c1", true);
  deliveries(1, "c1", 1, 1);
  ASSERT_EQ(link.observer.deliveries.size(), 1u);
  EXPECT_EQ(link.observer.deliveries[0].queue, "second");
  EXPECT_TRUE(link.observer.deliveries[0].no_ack);
}

TEST_F(SessionTracking, CancelledNoAckConsumerKeepsItsInFlightDeliveriesUntracked) {
  // basic.cancel with no-wait: deliveries the broker sent before it saw the cancel still
  // arrive, and they were sent under no-ack: the broker does not expect them to be settled.
  consume(1, "events", "c1", true);
  client_passes(method(1, amqp::BasicCancel{"c1", true}));
  deliveries(1, "c1", 1, 1);
  ASSERT_EQ(link.observer.deliveries.size(), 1u);
  EXPECT_TRUE(link.observer.deliveries[0].no_ack);
  EXPECT_EQ(link.observer.deliveries[0].queue, "events");
  link.observer.take_events();
  link.session.on_eof(Side::client);
  EXPECT_EQ(link.observer.take_events(), Events{})
      << "a no-ack delivery is reported as returned: the broker will not deliver it again";
}

}  // namespace
}  // namespace nackguard::session::test
