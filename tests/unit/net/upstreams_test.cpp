// Upstreams: address names, and readiness from the probes (ready while any address answers).

#include "proxy/net/upstreams.hpp"

#include <gtest/gtest.h>

namespace nackguard::net {
namespace {

using std::chrono::seconds;

class UpstreamsTest : public ::testing::Test {
 protected:
  Upstreams make(std::vector<config::Endpoint> addresses) {
    return Upstreams(addresses, "upstream.addresses", [this] { return now_; });
  }
  AddressPicker::Clock::time_point now_{seconds(1000)};
};

TEST_F(UpstreamsTest, NamesAreHostColonPortWithIpv6InBrackets) {
  Upstreams u = make({{"rabbit-0.rabbit", 5672}, {"::1", 5671}, {"10.0.0.3", 1}});
  EXPECT_EQ(u.names(),
            (std::vector<std::string>{"rabbit-0.rabbit:5672", "[::1]:5671", "10.0.0.3:1"}));
  EXPECT_EQ(u.addresses()[1].host, "::1");
  EXPECT_EQ(u.config_key(), "upstream.addresses");
}

TEST_F(UpstreamsTest, NotReadyUntilAProbeAnswers) {
  Upstreams u = make({{"a", 1}, {"b", 2}});
  EXPECT_EQ(u.unreachable(),
            "upstream a:1 has not been probed yet; upstream b:2 has not been probed yet");
  u.probed(1, std::nullopt);
  EXPECT_EQ(u.unreachable(), std::nullopt);
}

TEST_F(UpstreamsTest, ReadyWhileAtLeastOneAddressAnswers) {
  Upstreams u = make({{"a", 1}, {"b", 2}, {"c", 3}});
  u.probed(0, "upstream a:1 does not answer: Connection refused");
  u.probed(1, std::nullopt);
  u.probed(2, "upstream c:3 does not answer: Connection refused");
  EXPECT_EQ(u.unreachable(), std::nullopt);
  u.probed(1, "upstream b:2 did not answer within upstream.connect_timeout");
  EXPECT_EQ(u.unreachable(),
            "upstream a:1 does not answer: Connection refused; upstream b:2 did not answer "
            "within upstream.connect_timeout; upstream c:3 does not answer: Connection refused");
  u.probed(2, std::nullopt);
  EXPECT_EQ(u.unreachable(), std::nullopt);
}

TEST_F(UpstreamsTest, AFailedProbeSkipsTheAddressAndAGoodOneEndsTheSkip) {
  Upstreams u = make({{"a", 1}, {"b", 2}});
  u.probed(0, "upstream a:1 does not answer: Connection refused");
  EXPECT_TRUE(u.picker().skipped(0));
  EXPECT_EQ(u.picker().plan(), (std::vector<std::size_t>{1}));
  u.probed(0, std::nullopt);
  EXPECT_FALSE(u.picker().skipped(0));
}

TEST_F(UpstreamsTest, AProbeOfAnUnknownIndexIsIgnored) {
  Upstreams u = make({{"a", 1}});
  u.probed(3, std::nullopt);
  EXPECT_EQ(u.unreachable(), "upstream a:1 has not been probed yet");
}

}  // namespace
}  // namespace nackguard::net
