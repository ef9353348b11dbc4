// The management API's requests and what their answers mean, without a socket.

#include "proxy/net/management_request.hpp"

#include <gtest/gtest.h>

namespace nackguard::net {
namespace {

const ManagementSite kSite{"rabbit:15672", "/etc/nackguard/nackguard.yaml:30:3"};
constexpr retry::BrokerVersion k310{3, 10};

bool contains(const std::string& text, std::string_view part) {
  return text.find(part) != std::string::npos;
}

TEST(ManagementRequest, TargetsEncodeEachSegment) {
  EXPECT_EQ(queue_target("", {"/", "orders"}), "/api/queues/%2F/orders");
  EXPECT_EQ(queue_target("/rabbitmq", {"shop eu", "a/b?c#d%e"}),
            "/rabbitmq/api/queues/shop%20eu/a%2Fb%3Fc%23d%25e");
  EXPECT_EQ(queue_target("", {"v", "Ünï.~_-"}), "/api/queues/v/%C3%9Cn%C3%AF.~_-");
  EXPECT_EQ(overview_target(""), "/api/overview");
  EXPECT_EQ(overview_target("/rabbitmq"), "/rabbitmq/api/overview");
}

TEST(ManagementRequest, BasicAuthorization) {
  // RFC 7617's example.
  EXPECT_EQ(basic_authorization("Aladdin", "open sesame"), "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==");
  EXPECT_EQ(basic_authorization("guest", "guest"), "Basic Z3Vlc3Q6Z3Vlc3Q=");
}

TEST(ManagementRequest, AQueueAnswered) {
  const LookupAnswer answer = read_queue_answer(
      kSite, "/api/queues/%2F/orders", 200,
      R"({"type":"quorum","arguments":{},"effective_policy_definition":{"delivery-limit":5},)"
      R"("policy":"dl","operator_policy":""})",
      k310);
  ASSERT_EQ(answer.kind, LookupAnswer::Kind::limit) << answer.failure;
  EXPECT_EQ(answer.limit.limit, 5u);
  EXPECT_EQ(answer.limit.source, retry::LimitSource::policy);
}

TEST(ManagementRequest, NotFoundAndNoStatistics) {
  EXPECT_EQ(read_queue_answer(kSite, "/t", 404, R"({"error":"Object Not Found"})", k310).kind,
            LookupAnswer::Kind::not_found);
  EXPECT_EQ(read_queue_answer(kSite, "/t", 200, R"({"type":"quorum","arguments":{}})", k310).kind,
            LookupAnswer::Kind::no_statistics);
}

TEST(ManagementRequest, UnauthorizedSaysWhatToCheck) {
  const LookupAnswer answer =
      read_queue_answer(kSite, "/api/queues/%2F/orders", 401,
                        R"({"error":"not_authorized","reason":"Login failed"})", k310);
  ASSERT_EQ(answer.kind, LookupAnswer::Kind::failure);
  EXPECT_EQ(answer.failure_kind, "http 401");
  for (std::string_view part :
       {"rabbit:15672", "401", "/api/queues/%2F/orders", "Login failed",
        "upstream.management.username", "/etc/nackguard/nackguard.yaml:30:3", "monitoring tag"}) {
    EXPECT_TRUE(contains(answer.failure, part)) << part << " in " << answer.failure;
  }
}

TEST(ManagementRequest, OtherAnswersAreFailuresByStatus) {
  const LookupAnswer server_error =
      read_queue_answer(kSite, "/t", 500, std::string(300, 'x') + "\nmore", k310);
  EXPECT_EQ(server_error.failure_kind, "http 500");
  EXPECT_TRUE(contains(server_error.failure, "xxx..."));  // the body, cut short
  EXPECT_FALSE(contains(server_error.failure, "more"));
  const LookupAnswer html = read_queue_answer(kSite, "/t", 200, "<html>hello</html>", k310);
  EXPECT_EQ(html.failure_kind, "bad response");
  EXPECT_TRUE(contains(html.failure, "not JSON")) << html.failure;
  EXPECT_TRUE(contains(html.failure, "management plugin's own URL"));
}

TEST(ManagementRequest, TransportFailuresNameTheAddressAndTheFix) {
  const LookupAnswer refused = transport_failure(kSite, "connect", "connect: Connection refused");
  EXPECT_EQ(refused.failure_kind, "connect");
  EXPECT_TRUE(contains(refused.failure, "rabbit:15672: connect: Connection refused"));
  EXPECT_TRUE(contains(refused.failure, "rabbitmq_management plugin"));
  EXPECT_TRUE(
      contains(refused.failure, "upstream.management in /etc/nackguard/nackguard.yaml:30:3"));
  EXPECT_TRUE(
      contains(transport_failure(kSite, "timeout", "x").failure, "upstream.management.timeout"));
  EXPECT_TRUE(contains(transport_failure(kSite, "tls", "x").failure, "ca_file"));
}

}  // namespace
}  // namespace nackguard::net
