// amqp:// URLs and where the credentials come from: table-driven, each case named.
#include "proxy/replay/url.hpp"

#include <gtest/gtest.h>

#include "proxy/replay/errors.hpp"

namespace nackguard::replay {
namespace {

struct GoodUrl {
  const char* name;
  const char* url;
  ParsedUrl want;  // its host, port, user, password and vhost
};

void PrintTo(const GoodUrl& c, std::ostream* os) {
  *os << c.name;
}

const GoodUrl kGoodUrls[] = {
    {"full",
     "amqp://bob:secret@rabbit.example:5673/orders",
     {"rabbit.example", 5673, "bob", "secret", "orders"}},
    {"no_path_is_root_vhost", "amqp://u:p@h:1", {"h", 1, "u", "p", "/"}},
    {"empty_path_is_root_vhost", "amqp://u:p@h:1/", {"h", 1, "u", "p", "/"}},
    {"encoded_root_vhost", "amqp://u:p@h/%2F", {"h", 5672, "u", "p", "/"}},
    {"lowercase_escape", "amqp://u:p@h/%2f", {"h", 5672, "u", "p", "/"}},
    {"vhost_with_encoded_slash",
     "amqp://h/team%2Forders",
     {"h", 5672, std::nullopt, std::nullopt, "team/orders"}},
    {"default_port", "amqp://u:p@h/v", {"h", 5672, "u", "p", "v"}},
    {"no_credentials", "amqp://h:5672/v", {"h", 5672, std::nullopt, std::nullopt, "v"}},
    {"user_without_password", "amqp://u@h", {"h", 5672, "u", "", "/"}},
    {"empty_password", "amqp://u:@h", {"h", 5672, "u", "", "/"}},
    {"encoded_credentials", "amqp://a%40b:p%3Aw%2Fd%25@h", {"h", 5672, "a@b", "p:w/d%", "/"}},
    {"colon_in_password", "amqp://u:a:b@h", {"h", 5672, "u", "a:b", "/"}},
    {"ipv6", "amqp://u:p@[::1]:5700/v", {"::1", 5700, "u", "p", "v"}},
    {"ipv6_default_port", "amqp://[fe80::1]", {"fe80::1", 5672, std::nullopt, std::nullopt, "/"}},
    {"max_port", "amqp://h:65535", {"h", 65535, std::nullopt, std::nullopt, "/"}},
};

class GoodUrlTest : public testing::TestWithParam<GoodUrl> {};

TEST_P(GoodUrlTest, Parses) {
  const GoodUrl& c = GetParam();
  ParsedUrl url = parse_amqp_url(c.url);
  EXPECT_EQ(url.host, c.want.host);
  EXPECT_EQ(url.port, c.want.port);
  EXPECT_EQ(url.user, c.want.user);
  EXPECT_EQ(url.password, c.want.password);
  EXPECT_EQ(url.vhost, c.want.vhost);
}

INSTANTIATE_TEST_SUITE_P(Urls, GoodUrlTest, testing::ValuesIn(kGoodUrls),
                         [](const auto& info) { return std::string(info.param.name); });

struct BadUrl {
  const char* name;
  const char* url;
  const char* message_part;
};

void PrintTo(const BadUrl& c, std::ostream* os) {
  *os << c.name;
}

const BadUrl kBadUrls[] = {
    {"wrong_scheme", "http://u:s3cret@h/", "must start with amqp://"},
    {"no_scheme", "u:s3cret@h:5672", "must start with amqp://"},
    {"amqps_typo", "amqpss://u:s3cret@h/", "amqps://"},
    {"unknown_mechanism", "amqps://u:s3cret@h/?auth_mechanism=kerberos", "external or plain"},
    {"fragment", "amqp://u:s3cret@h/v#x", "fragment"},
    {"port_not_a_number", "amqp://u:s3cret@h:abc/", "port"},
    {"port_zero", "amqp://u:s3cret@h:0/", "port"},
    {"port_too_big", "amqp://u:s3cret@h:65536/", "port"},
    {"port_empty", "amqp://u:s3cret@h:/", "port"},
    {"port_trailing_text", "amqp://u:s3cret@h:5672x/", "port"},
    {"no_host", "amqp://u:s3cret@/v", "host is missing"},
    {"empty", "amqp://", "host is missing"},
    {"empty_user", "amqp://:s3cret@h/", "user name"},
    {"bad_escape_in_vhost", "amqp://u:s3cret@h/%zz", "vhost"},
    {"short_escape", "amqp://u:s3cret@h/%2", "vhost"},
    {"bad_escape_in_password", "amqp://u:s3cret%@h/", "password"},
    {"raw_slash_in_vhost", "amqp://u:s3cret@h/a/b", "%2F"},
    {"query", "amqp://u:s3cret@h/v?heartbeat=10", "query"},
    {"unclosed_ipv6", "amqp://u:s3cret@[::1/v", "IPv6"},
};

class BadUrlTest : public testing::TestWithParam<BadUrl> {};

TEST_P(BadUrlTest, FailsWithAClearMessageThatHidesTheUrl) {
  const BadUrl& c = GetParam();
  try {
    parse_amqp_url(c.url);
    FAIL() << "parsed " << c.url;
  } catch (const Failure& e) {
    std::string message = e.what();
    EXPECT_NE(message.find(c.message_part), std::string::npos) << message;
    EXPECT_NE(message.find("bad --upstream URL"), std::string::npos) << message;
    EXPECT_EQ(message.find("s3cret"), std::string::npos) << "the password leaked: " << message;
  }
}

INSTANTIATE_TEST_SUITE_P(Urls, BadUrlTest, testing::ValuesIn(kBadUrls),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(ParseAmqpUrl, AmqpsIsTlsOnPort5671ByDefault) {
  ParsedUrl url = parse_amqp_url("amqps://u:p@rabbit/v");
  EXPECT_TRUE(url.tls);
  EXPECT_FALSE(url.external);
  EXPECT_EQ(url.port, kDefaultAmqpsPort);
  EXPECT_EQ(url.host, "rabbit");
  EXPECT_EQ(url.vhost, "v");
  EXPECT_EQ(parse_amqp_url("amqps://rabbit:5700").port, 5700);
  EXPECT_FALSE(parse_amqp_url("amqp://rabbit").tls);
}

TEST(ParseAmqpUrl, AuthMechanismExternalInTheQuery) {
  ParsedUrl url = parse_amqp_url("amqps://rabbit/%2F?auth_mechanism=EXTERNAL");
  EXPECT_TRUE(url.external);
  EXPECT_EQ(url.vhost, "/");
  EXPECT_FALSE(parse_amqp_url("amqps://rabbit/?auth_mechanism=plain").external);
  Upstream upstream = resolve_upstream("amqps://rabbit:5700/v?auth_mechanism=external", "");
  EXPECT_TRUE(upstream.tls);
  EXPECT_TRUE(upstream.external);
  EXPECT_EQ(upstream.port, 5700);
}

TEST(PercentDecode, DecodesEscapesAndRejectsMalformedOnes) {
  EXPECT_EQ(percent_decode("a%20b%2F%2f"), "a b//");
  EXPECT_EQ(percent_decode(""), "");
  EXPECT_EQ(percent_decode("%00"), std::string(1, '\0'));
  EXPECT_EQ(percent_decode("%"), std::nullopt);
  EXPECT_EQ(percent_decode("%G0"), std::nullopt);
}

TEST(Endpoint, BracketsIpv6AndNeverShowsCredentials) {
  Upstream upstream{"::1", 5672, "u", "s3cret", "/"};
  EXPECT_EQ(upstream.endpoint(), "[::1]:5672");
  upstream.host = "rabbit";
  EXPECT_EQ(upstream.endpoint(), "rabbit:5672");
}

// ---- precedence between --upstream and NACKGUARD_REPLAY_UPSTREAM ----

TEST(ResolveUpstream, CommandLineAlone) {
  Upstream u = resolve_upstream("amqp://bob:pw@h:1/v", std::nullopt);
  EXPECT_EQ(u, (Upstream{"h", 1, "bob", "pw", "v"}));
}

TEST(ResolveUpstream, CommandLineWithoutCredentialsDefaultsToGuest) {
  Upstream u = resolve_upstream("amqp://h:1/v", std::nullopt);
  EXPECT_EQ(u.user, "guest");
  EXPECT_EQ(u.password, "guest");
}

TEST(ResolveUpstream, EnvironmentUrlAlone) {
  Upstream u = resolve_upstream(std::nullopt, "amqp://bob:pw@h:1/%2F");
  EXPECT_EQ(u, (Upstream{"h", 1, "bob", "pw", "/"}));
}

TEST(ResolveUpstream, EnvironmentCredentialsFillACommandLineWithoutThem) {
  Upstream u = resolve_upstream("amqp://h:1/v", "bob:p%40ss:word");
  EXPECT_EQ(u, (Upstream{"h", 1, "bob", "p@ss:word", "v"}));
}

TEST(ResolveUpstream, EnvironmentUrlCredentialsFillACommandLineWithoutThem) {
  Upstream u = resolve_upstream("amqp://h:1/v", "amqp://bob:pw@elsewhere:2/other");
  EXPECT_EQ(u, (Upstream{"h", 1, "bob", "pw", "v"}));
}

TEST(ResolveUpstream, CommandLineCredentialsWin) {
  Upstream u = resolve_upstream("amqp://cli:c@h:1/v", "env:e");
  EXPECT_EQ(u.user, "cli");
  EXPECT_EQ(u.password, "c");
}

TEST(ResolveUpstream, EmptyEnvironmentIsIgnored) {
  Upstream u = resolve_upstream("amqp://h:1/v", "");
  EXPECT_EQ(u.user, "guest");
}

TEST(ResolveUpstream, NoBrokerAnywhereIsAUsageError) {
  EXPECT_THROW(resolve_upstream(std::nullopt, std::nullopt), UsageError);
  EXPECT_THROW(resolve_upstream(std::nullopt, "bob:pw"), UsageError);
}

TEST(ResolveUpstream, MalformedEnvironmentNamesTheVariable) {
  try {
    resolve_upstream("amqp://h/", "just-a-user");
    FAIL();
  } catch (const Failure& e) {
    EXPECT_NE(std::string(e.what()).find("NACKGUARD_REPLAY_UPSTREAM"), std::string::npos);
  }
  try {
    resolve_upstream(std::nullopt, "amqp://u:p@h:99999/");
    FAIL();
  } catch (const Failure& e) {
    EXPECT_NE(std::string(e.what()).find("bad NACKGUARD_REPLAY_UPSTREAM URL"), std::string::npos);
  }
}

}  // namespace
}  // namespace nackguard::replay
