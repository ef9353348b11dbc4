#pragma once
// The fixture of the delivery tracking tests: a session past its handshake, with helpers
// for consumers, gets and deliveries.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "session/script.hpp"

namespace nackguard::session::test {

using Events = std::vector<std::string>;

class SessionTracking : public ::testing::Test {
 protected:
  void SetUp() override { handshake(link); }

  // consume and consume-ok; the broker names the consumer `server_tag` if the client did not.
  void consume(std::uint16_t ch, std::string queue, std::string tag, bool no_ack = false,
               std::string server_tag = "") {
    link.client(method(ch, consume_method(std::move(queue), tag, no_ack)));
    link.broker(method(ch, amqp::BasicConsumeOk{tag.empty() ? server_tag : tag}));
    drain();
  }
  void deliveries(std::uint16_t ch, const std::string& consumer, std::uint64_t first,
                  std::uint64_t last) {
    for (std::uint64_t tag = first; tag <= last; ++tag) link.broker(deliver(ch, consumer, tag));
    drain();
  }
  // Consumer "c1" of queue "q" on channel `ch` holds deliveries 1 to `last`, which the
  // observer has heard of (its events taken).
  void holding(std::uint64_t last, std::uint16_t ch = 1) {
    consume(ch, "q", "c1");
    deliveries(ch, "c1", 1, last);
    link.observer.take_events();
  }
  // The session, its last tick at `from`, ends `ms` later and not a millisecond before.
  void ends_after(std::int64_t from, std::int64_t ms) {
    link.session.on_tick(from + ms - 1);
    EXPECT_FALSE(link.session.finished());
    link.session.on_tick(from + ms);
    EXPECT_TRUE(link.session.finished());
  }
  void drain() {
    link.client_bytes();
    link.broker_bytes();
  }
  // Feeds a client frame and checks that it reaches the broker as it is.
  void client_passes(const Bytes& frame) {
    link.client(frame);
    EXPECT_EQ(link.broker_bytes(), frame);
  }
  void broker_passes(const Bytes& frame) {
    link.broker(frame);
    EXPECT_EQ(link.client_bytes(), frame);
  }

  Link link;
};

}  // namespace nackguard::session::test
