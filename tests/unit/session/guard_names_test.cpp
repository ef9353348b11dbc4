// A counted return leaves the message's queue (and, only when asked, its identity) in the
// context's TrackerNames, where /status finds the names behind the tracker's keys.

#include <gtest/gtest.h>

#include "session/guard_script.hpp"

namespace nackguard::session::guard_test {
namespace {

class GuardNames : public GuardTest {};

TEST_F(GuardNames, ACountedReturnRecordsTheQueueButNotTheIdentity) {
  start(policy(5));
  const Message m = message("m-1");
  deliver_passes(delivery(1, m));
  EXPECT_FALSE(context->tracker_names().find(retry::make_key("q", "message_id:m-1")));
  client_passes(nack(kCh, 1));
  const auto name = context->tracker_names().find(retry::make_key("q", "message_id:m-1"));
  ASSERT_TRUE(name);
  EXPECT_EQ(name->queue, "q");
  EXPECT_EQ(name->identity, "");
  EXPECT_EQ(context->tracker_names().size(), 1u);
}

TEST_F(GuardNames, TheIdentityIsKeptWhenStatusMayShowIt) {
  start(policy(5));
  context->tracker_names().set_keep_identities(true);
  const Message m = message("m-2");
  deliver_passes(delivery(1, m));
  client_passes(nack(kCh, 1));
  const auto name = context->tracker_names().find(retry::make_key("q", "message_id:m-2"));
  ASSERT_TRUE(name);
  EXPECT_EQ(name->identity, "message_id:m-2");
}

}  // namespace
}  // namespace nackguard::session::guard_test
