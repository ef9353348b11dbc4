#include "proxy/net/direct_write.hpp"

#include <gtest/gtest.h>

namespace nackguard::net {
namespace {

using std::chrono::microseconds;

DirectWrite quiet_tls() {
  DirectWrite d;
  d.tls = true;
  d.since_last_write = microseconds(200);  // a message every 200 µs: each one alone
  return d;
}

TEST(DirectWrite, PlainTcpSendsDirectlyWheneverNothingIsInFlight) {
  DirectWrite d;
  d.since_last_write = microseconds(0);  // no matter how busy
  EXPECT_TRUE(may_send_directly(d));
  d.writing = 1;
  EXPECT_FALSE(may_send_directly(d));
  d.writing = 0;
  d.sent_ahead = 1;
  EXPECT_FALSE(may_send_directly(d));
  d.sent_ahead = 0;
  d.closed = true;
  EXPECT_FALSE(may_send_directly(d));
}

TEST(DirectWrite, TlsSendsALoneMessageDirectly) {
  EXPECT_TRUE(may_send_directly(quiet_tls()));
  DirectWrite d = quiet_tls();
  d.since_last_write = kQuietWrite;
  EXPECT_TRUE(may_send_directly(d));
}

TEST(DirectWrite, TlsLeavesAStreamToTheWriter) {
  DirectWrite d = quiet_tls();
  d.since_last_write = kQuietWrite - microseconds(1);
  EXPECT_FALSE(may_send_directly(d));
  d = quiet_tls();
  d.source_holds_input = true;  // more records of this burst are already here
  EXPECT_FALSE(may_send_directly(d));
}

TEST(DirectWrite, TlsNeverOvertakesTheWriter) {
  DirectWrite d = quiet_tls();
  d.writing = 10;
  EXPECT_FALSE(may_send_directly(d));
  d = quiet_tls();
  d.sent_ahead = 3;  // a cut record the writer must finish first
  EXPECT_FALSE(may_send_directly(d));
  d = quiet_tls();
  d.closed = true;
  EXPECT_FALSE(may_send_directly(d));
}

}  // namespace
}  // namespace nackguard::net
