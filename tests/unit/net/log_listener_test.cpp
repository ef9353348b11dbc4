// The log lines that name a message carry its short id, the one /status shows for it when
// identities are hidden.

#include "proxy/net/log_listener.hpp"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <sstream>

namespace nackguard::net {
namespace {

class LogListenerTest : public testing::Test {
 protected:
  void SetUp() override {
    previous_ = spdlog::default_logger();
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    auto logger = std::make_shared<spdlog::logger>("test", sink);
    logger->set_pattern("%v");
    spdlog::set_default_logger(logger);
  }
  void TearDown() override { spdlog::set_default_logger(previous_); }

  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> previous_;
};

TEST_F(LogListenerTest, DeadLetterAndAckTimeoutLinesCarryTheShortId) {
  LogListener listener;
  const std::string id = retry::short_id(retry::make_key("orders", "message_id:42"));
  listener.on_dead_letter("orders", "message_id:42", 6, retry::DeadLetterReason::max_redeliveries);
  listener.on_ack_timeout("orders", "message_id:42", 1500);
  EXPECT_EQ(out_.str(),
            "dead-lettered: queue=orders identity=message_id:42 returns=6 "
            "reason=max_redeliveries id=" +
                id +
                "\n"
                "ack timeout: queue=orders identity=message_id:42 id=" +
                id +
                " unacked for 1500 ms, past the policy's ack_timeout; the consumer's channel is "
                "closed (406) and the delivery counts one return\n");
}

// One line per queue and cause every 10 s: a fallback at the broker's limit names its cause
// under it, and counts as one cause whatever that is.
TEST_F(LogListenerTest, FallbackLinesNameTheCauseAndRepeatsAreSuppressed) {
  LogListener listener;
  using retry::FallbackCause;
  listener.on_fallback("orders", {FallbackCause::republish_failed, false}, "no confirm");
  listener.on_fallback("orders", {FallbackCause::republish_failed, false}, "no confirm");
  listener.on_fallback("orders", {FallbackCause::encode_failed, false}, "a name over 255 bytes");
  listener.on_fallback("orders", {FallbackCause::body_not_retained, true}, "over the budget");
  listener.on_fallback("orders", {FallbackCause::republish_failed, true}, "no confirm");
  const std::string forwarded =
      "; the message went back to the broker as the consumer asked, nothing is lost (0 similar "
      "lines suppressed)\n";
  EXPECT_EQ(out_.str(),
            "fallback: queue=orders cause=republish_failed: no confirm" + forwarded +
                "fallback: queue=orders cause=encode_failed: a name over 255 bytes" + forwarded +
                "fallback: queue=orders cause=at_broker_limit: body_not_retained: over the "
                "budget; the message went back to the broker, whose own delivery limit may now "
                "dead-letter or drop it (0 similar lines suppressed)\n");
}

}  // namespace
}  // namespace nackguard::net
