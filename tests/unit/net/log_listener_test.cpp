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

}  // namespace
}  // namespace nackguard::net
