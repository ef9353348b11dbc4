// upstream.addresses: the list of broker nodes, the alternative to upstream.host/port. What it
// reads, how --check-config shows it, the TLS name it implies, and every way it can be wrong
// (each message names the file, line, column and key).

#include <gtest/gtest.h>

#include "config/config_test_support.hpp"
#include "proxy/config/config.hpp"
#include "proxy/config/upstream_addresses.hpp"

namespace nackguard::config {
namespace {

namespace fs = std::filesystem;
using testing::config_error_of;
using testing::starts_with;
using testing::TempTree;

class UpstreamAddresses : public testing::ConfigFileTest {};

bool same(const std::vector<Endpoint>& got, const std::vector<Endpoint>& want) {
  if (got.size() != want.size()) return false;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i].host != want[i].host || got[i].port != want[i].port) return false;
  }
  return true;
}

TEST_F(UpstreamAddresses, ReadsTheListInOrder) {
  const Config config = load(R"(upstream:
  addresses: ["rabbit-0.rabbit:5672", "rabbit-1.rabbit:5673", 10.0.0.3:5674, "[fd00::7]:5675"]
)");
  EXPECT_TRUE(same(config.upstream_addresses, {{"rabbit-0.rabbit", 5672},
                                               {"rabbit-1.rabbit", 5673},
                                               {"10.0.0.3", 5674},
                                               {"fd00::7", 5675}}));
  EXPECT_TRUE(same(upstream_targets(config), config.upstream_addresses));
  // upstream is the first address, for whatever names a single broker.
  EXPECT_EQ(config.upstream.host, "rabbit-0.rabbit");
  EXPECT_EQ(config.upstream.port, 5672);
}

TEST_F(UpstreamAddresses, BlockListWorksToo) {
  const Config config = load("upstream:\n  addresses:\n    - a:1\n    - b:2\n");
  EXPECT_TRUE(same(config.upstream_addresses, {{"a", 1}, {"b", 2}}));
}

TEST_F(UpstreamAddresses, WithoutTheKeyTheTargetIsHostAndPort) {
  const Config config = load("upstream: {host: rabbit.internal, port: 5671}\n");
  EXPECT_TRUE(config.upstream_addresses.empty());
  EXPECT_TRUE(same(upstream_targets(config), {{"rabbit.internal", 5671}}));
}

TEST_F(UpstreamAddresses, DescribeShowsTheListInsteadOfHostAndPort) {
  const std::string text =
      describe(load("upstream:\n  addresses: [a:1, \"[::1]:2\"]\n  tls: {verify: false}\n"));
  EXPECT_NE(text.find("\nupstream.addresses: [a:1, [::1]:2]\nupstream.connect_timeout: 5s\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("upstream.host"), std::string::npos) << text;
  EXPECT_NE(text.find("upstream.tls.server_name: (each address's host name)\n"), std::string::npos)
      << text;
}

TEST_F(UpstreamAddresses, TlsServerNameIsEachAddressesOwnUnlessSet) {
  EXPECT_EQ(load("upstream:\n  addresses: [a:1, b:2]\n  tls: {}\n").upstream_tls->server_name, "");
  EXPECT_EQ(load("upstream:\n  addresses: [a:1, b:2]\n  tls: {server_name: rabbit.example}\n")
                .upstream_tls->server_name,
            "rabbit.example");
  // With host/port it stays the host, as before.
  EXPECT_EQ(load("upstream:\n  host: rabbit.internal\n  tls: {}\n").upstream_tls->server_name,
            "rabbit.internal");
}

TEST_F(UpstreamAddresses, TheMostAddressesAccepted) {
  std::string list;
  for (std::size_t i = 0; i < detail::kMaxUpstreamAddresses; ++i) {
    list += (i ? ", " : "") + std::string("n") + std::to_string(i) + ":5672";
  }
  EXPECT_EQ(load("upstream: {addresses: [" + list + "]}\n").upstream_addresses.size(),
            detail::kMaxUpstreamAddresses);
  EXPECT_EQ(error_for("upstream: {addresses: [" + list + ", x:1]}\n"),
            "FILE:1:23: upstream.addresses: expected at most 64 addresses, got 65; list a "
            "few nodes of the cluster, or put a load balancer in front of them");
}

TEST_F(UpstreamAddresses, BothAddressesAndHostIsAnErrorNamingBothLines) {
  EXPECT_EQ(error_for("upstream:\n  host: rabbit\n  addresses: [a:1, b:2]\n"),
            "FILE:3:14: upstream.addresses: set together with upstream.host (line 2); use one "
            "of them: upstream.addresses for several broker nodes, or upstream.host and "
            "upstream.port for one");
  EXPECT_EQ(error_for("upstream:\n  addresses: [a:1]\n  port: 5672\n"),
            "FILE:2:14: upstream.addresses: set together with upstream.port (line 3); use one "
            "of them: upstream.addresses for several broker nodes, or upstream.host and "
            "upstream.port for one");
}

TEST_F(UpstreamAddresses, NotAList) {
  EXPECT_EQ(error_for("upstream:\n  addresses: rabbit:5672\n"),
            "FILE:2:14: upstream.addresses: expected a list of \"host:port\" strings such as "
            "[\"rabbit-0.rabbit:5672\", \"rabbit-1.rabbit:5672\"], got the scalar "
            "\"rabbit:5672\"");
  EXPECT_TRUE(starts_with(error_for("upstream:\n  addresses: {a: 1}\n"),
                          "FILE:2:14: upstream.addresses: expected a list of \"host:port\" "
                          "strings such as [\"rabbit-0.rabbit:5672\", \"rabbit-1.rabbit:5672\"], "
                          "got a map"));
}

// A list that is empty, has a bad element or names an address twice: the message names the
// line, the column and, for an element, its index.
struct BadListCase {
  const char* name;
  const char* yaml;
  const char* error;
};

const BadListCase kBadLists[] = {
    {"EmptyList", "upstream:\n  addresses: []\n",
     "FILE:2:14: upstream.addresses: expected at least one \"host:port\", got an empty list; list "
     "the broker nodes, or remove upstream.addresses to use upstream.host and upstream.port"},
    {"NoPort", "upstream:\n  addresses:\n    - a:1\n    - rabbit-1.rabbit\n",
     "FILE:4:7: upstream.addresses[1]: expected \"host:port\" such as \"rabbit-0.rabbit:5672\", "
     "got \"rabbit-1.rabbit\": the port is missing"},
    {"PortZero", "upstream:\n  addresses: [a:1, b:0]\n",
     "FILE:2:20: upstream.addresses[1]: expected \"host:port\" such as \"rabbit-0.rabbit:5672\", "
     "got \"b:0\": the port must be a number from 1 to 65535"},
    {"ElementIsAList", "upstream:\n  addresses: [[a, b]]\n",
     "FILE:2:15: upstream.addresses[0]: expected \"host:port\", got a list"},
    {"Duplicate", "upstream:\n  addresses: [a:1, b:2, a:1]\n",
     "FILE:2:25: upstream.addresses[2]: \"a:1\" is listed twice (also upstream.addresses[0]); "
     "list each address once"},
};

TEST_F(UpstreamAddresses, BadListsAndElementsAreNamedByLineAndIndex) {
  for (const BadListCase& c : kBadLists) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(error_for(c.yaml), c.error);
  }
}

struct HostPortCase {
  const char* name;
  const char* text;
  const char* host;  // nullptr: refused
  unsigned port;
  const char* why;
};

class ParseHostPort : public ::testing::TestWithParam<HostPortCase> {};

TEST_P(ParseHostPort, ReadsOrRefuses) {
  std::string why;
  const auto endpoint = detail::parse_host_port(GetParam().text, why);
  if (GetParam().host == nullptr) {
    EXPECT_FALSE(endpoint.has_value());
    EXPECT_EQ(why, GetParam().why);
    return;
  }
  ASSERT_TRUE(endpoint.has_value()) << why;
  EXPECT_EQ(endpoint->host, GetParam().host);
  EXPECT_EQ(endpoint->port, GetParam().port);
  EXPECT_EQ(to_string(*endpoint), GetParam().text);
}

constexpr const char* kBadPort = "the port must be a number from 1 to 65535";
constexpr const char* kBadHost = "the host name is empty or holds a space, a slash or a bracket";
constexpr const char* kBadIpv6 = "an IPv6 address is written [address]:port";

const HostPortCase kHostPortCases[] = {
    {"Name", "rabbit-0.rabbit:5672", "rabbit-0.rabbit", 5672, ""},
    {"Ipv4", "10.1.2.3:1", "10.1.2.3", 1, ""},
    {"Ipv6", "[::1]:65535", "::1", 65535, ""},
    {"NoPort", "rabbit", nullptr, 0, "the port is missing"},
    {"EmptyPort", "rabbit:", nullptr, 0, kBadPort},
    {"PortTooLarge", "rabbit:65536", nullptr, 0, kBadPort},
    {"PortWord", "rabbit:amqp", nullptr, 0, kBadPort},
    {"PortSigned", "rabbit:+5672", nullptr, 0, kBadPort},
    {"EmptyHost", ":5672", nullptr, 0, kBadHost},
    {"HostWithSpace", "rab bit:5672", nullptr, 0, kBadHost},
    {"Url", "amqp://rabbit:5672", nullptr, 0, kBadIpv6},
    {"BareIpv6", "::1:5672", nullptr, 0, kBadIpv6},
    {"UnclosedBracket", "[::1:5672", nullptr, 0, kBadIpv6},
};

INSTANTIATE_TEST_SUITE_P(Table, ParseHostPort, ::testing::ValuesIn(kHostPortCases),
                         [](const ::testing::TestParamInfo<HostPortCase>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace nackguard::config
