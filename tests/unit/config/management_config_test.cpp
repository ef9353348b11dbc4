// upstream.management: the URL, the user and password (or password file), refresh and
// timeout, the https keys, and every way they can be wrong, each message naming
// file:line:column and the key.

#include <gtest/gtest.h>

#include <string>

#include "config/config_test_support.hpp"
#include "proxy/config/config.hpp"
#include "proxy/config/management_section.hpp"

namespace nackguard::config {
namespace {

using testing::contains;
using testing::starts_with;
using testing::TempTree;

class ManagementConfig : public testing::ConfigFileTest {
 protected:
  ManagementConfig() {
    tree_.write("s3cret\n", "password");
    tree_.write("PEM", "ca.pem");
  }
};

constexpr const char* kMinimal = R"(upstream:
  management:
    url: http://127.0.0.1:15672
    username: nackguard-monitor
    password_file: password
)";

TEST_F(ManagementConfig, AbsentMeansNoLookups) {
  EXPECT_FALSE(load("upstream: {port: 5700}\n").upstream_management.has_value());
}

// What the url gave: http or https, the host, the port and the path prefix.
void expect_url(const UpstreamManagement& api, bool https, const char* host, std::uint16_t port,
                const char* path_prefix) {
  EXPECT_EQ(api.https, https);
  EXPECT_EQ(api.endpoint.host, host);
  EXPECT_EQ(api.endpoint.port, port);
  EXPECT_EQ(api.path_prefix, path_prefix);
}

TEST_F(ManagementConfig, MinimalWithDefaults) {
  const Config config = load(kMinimal);
  ASSERT_TRUE(config.upstream_management.has_value());
  const UpstreamManagement& api = *config.upstream_management;
  expect_url(api, false, "127.0.0.1", 15672, "");
  EXPECT_EQ(api.username, "nackguard-monitor");
  EXPECT_EQ(api.password, "s3cret");  // the file's final newline is not part of it
  EXPECT_EQ(api.password_file.path, tree_.root() / "conf" / "password");
  EXPECT_EQ(api.refresh, std::chrono::seconds(60));
  EXPECT_EQ(api.timeout, std::chrono::seconds(5));
  EXPECT_TRUE(api.verify);
  EXPECT_TRUE(api.ca_file.empty());
  EXPECT_TRUE(
      starts_with(api.location, (tree_.root() / "conf" / "nackguard.yaml").string() + ":2:3"))
      << api.location;
}

TEST_F(ManagementConfig, HttpsWithEveryKey) {
  const Config config = load(R"(upstream:
  management:
    url: https://rabbit.example:15671/rabbitmq/
    username: monitor
    password: inline
    refresh: 30s
    timeout: 2s
    verify: false
    ca_file: ca.pem
)");
  const UpstreamManagement& api = *config.upstream_management;
  expect_url(api, true, "rabbit.example", 15671, "/rabbitmq");
  EXPECT_EQ(api.password, "inline");
  EXPECT_TRUE(api.password_file.empty());
  EXPECT_EQ(api.refresh, std::chrono::seconds(30));
  EXPECT_EQ(api.timeout, std::chrono::seconds(2));
  EXPECT_FALSE(api.verify);
  EXPECT_EQ(api.ca_file.path, tree_.root() / "conf" / "ca.pem");
}

TEST_F(ManagementConfig, CheckConfigDescribesItWithoutThePassword) {
  const std::string text = describe(load(kMinimal));
  EXPECT_TRUE(contains(text, "upstream.management.url: http://127.0.0.1:15672\n")) << text;
  EXPECT_TRUE(contains(text, "upstream.management.username: nackguard-monitor\n"));
  EXPECT_TRUE(contains(text, "upstream.management.password: (read from " +
                                 (tree_.root() / "conf" / "password").string() + ")\n"));
  EXPECT_TRUE(contains(text, "upstream.management.refresh: 1m\n"));
  EXPECT_TRUE(contains(text, "upstream.management.timeout: 5s\n"));
  EXPECT_FALSE(contains(text, "s3cret"));
  EXPECT_FALSE(contains(text, "verify"));  // https only
  EXPECT_FALSE(contains(describe(load("threads: 1\n")), "management"));
}

TEST(ManagementUrl, Parses) {
  std::string why;
  auto url = detail::parse_management_url("http://rabbit", why);
  ASSERT_TRUE(url) << why;
  EXPECT_EQ(url->endpoint.port, 80);
  url = detail::parse_management_url("https://[fd00::7]", why);
  ASSERT_TRUE(url) << why;
  EXPECT_EQ(url->endpoint.host, "fd00::7");
  EXPECT_EQ(url->endpoint.port, 443);
  url = detail::parse_management_url("http://[::1]:15672/", why);
  ASSERT_TRUE(url) << why;
  EXPECT_EQ(url->endpoint.port, 15672);
  EXPECT_EQ(url->path_prefix, "");
}

struct BadUrl {
  const char* url;
  const char* why;
};

TEST(ManagementUrl, Refuses) {
  for (const BadUrl& bad :
       {BadUrl{"ftp://rabbit:15672", "http:// or https://"},
        BadUrl{"rabbit:15672", "http:// or https://"},
        BadUrl{"http://user:pw@rabbit:15672", "username and password_file"},
        BadUrl{"http://rabbit:15672/api/", "without /api"},
        BadUrl{"http://rabbit:15672?x=1", "query"}, BadUrl{"http://rabbit:0", "port"},
        BadUrl{"http://rabbit:99999", "port"}, BadUrl{"http://:15672", "host"},
        BadUrl{"http://::1:15672", "[address]:port"}}) {
    std::string why;
    EXPECT_FALSE(detail::parse_management_url(bad.url, why)) << bad.url;
    EXPECT_TRUE(contains(why, bad.why)) << bad.url << ": " << why;
  }
}

struct BadConfig {
  const char* yaml;
  const char* expected;  // the start of the message, with "FILE" for the config's path
  const char* also;      // a part of what to do
};

TEST_F(ManagementConfig, ErrorsNameTheKeyAndWhatToDo) {
  const BadConfig cases[] = {
      {"upstream:\n  management:\n", "FILE:2:3: upstream.management: expected a map",
       "remove management"},
      {"upstream:\n  management:\n    username: u\n    password: p\n",
       "FILE:3:5: upstream.management: url is missing", "http://127.0.0.1:15672"},
      {"upstream:\n  management:\n    url: amqp://rabbit:5672\n    username: u\n"
       "    password: p\n",
       "FILE:3:10: upstream.management.url: expected a URL", "http:// or https://"},
      {"upstream:\n  management:\n    url: http://rabbit:15672\n    password: p\n",
       "FILE:3:5: upstream.management: username is missing", "monitoring tag"},
      {"upstream:\n  management:\n    url: http://rabbit:15672\n    username: u\n",
       "FILE:3:5: upstream.management: password_file is missing", "password_file"},
      {"upstream:\n  management:\n    url: http://rabbit:15672\n    username: u\n"
       "    password: p\n    password_file: password\n",
       "FILE:5:15: upstream.management.password: set together with", "remove password"},
      {"upstream:\n  management:\n    url: http://rabbit:15672\n    username: u\n"
       "    password_file: missing\n",
       "FILE:5:20: upstream.management.password_file: the password file", "does not exist"},
      {"upstream:\n  management:\n    url: http://rabbit:15672\n    username: a:b\n"
       "    password: p\n",
       "FILE:4:15: upstream.management.username: holds a colon", "basic authentication"},
      {"upstream:\n  management:\n    url: http://rabbit:15672\n    username: u\n"
       "    password: p\n    ca_file: ca.pem\n",
       "FILE:6:14: upstream.management.ca_file: applies to https URLs only", "use https"},
      {"upstream:\n  management:\n    url: http://rabbit:15672\n    username: u\n"
       "    password: p\n    refresh: 10ms\n",
       "FILE:6:14: upstream.management.refresh: expected a duration from 1s to 24h", "10ms"},
      {"upstream:\n  management:\n    url: http://rabbit:15672\n    username: u\n"
       "    password: p\n    timeout: 5\n",
       "FILE:6:14: upstream.management.timeout:", "unit"},
      {"upstream:\n  management:\n    url: http://rabbit:15672\n    usernme: u\n",
       "FILE:4:5: unknown key \"upstream.management.usernme\"", "did you mean \"username\""},
  };
  for (const BadConfig& c : cases) {
    const std::string message = error_for(c.yaml);
    EXPECT_TRUE(starts_with(message, c.expected)) << c.yaml << "\n" << message;
    EXPECT_TRUE(contains(message, c.also)) << c.yaml << "\n" << message;
  }
}

TEST_F(ManagementConfig, AnEmptyPasswordFileIsRefused) {
  tree_.write("\n", "empty");
  const std::string message = error_for(
      "upstream:\n  management:\n    url: http://r:1\n    username: u\n"
      "    password_file: empty\n");
  EXPECT_TRUE(starts_with(message,
                          "FILE:5:20: upstream.management.password_file: the "
                          "password file"))
      << message;
  EXPECT_TRUE(contains(message, "is empty")) << message;
}

}  // namespace
}  // namespace nackguard::config
