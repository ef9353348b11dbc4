#include "proxy/metrics/http_routes.hpp"

#include <gtest/gtest.h>

#include <stdexcept>

#include "proxy/metrics/text_format.hpp"

namespace nackguard::metrics {
namespace {

struct RouteCase {
  const char* name;
  const char* method;
  const char* target;
  HttpReply want;
};

class Routes : public testing::TestWithParam<RouteCase> {};

TEST_P(Routes, Answer) {
  HttpHandlers handlers;
  handlers.metrics = [] { return std::string("page\n"); };
  const RouteCase& c = GetParam();
  const HttpReply reply = route_request(c.method, c.target, handlers);
  EXPECT_EQ(reply.status, c.want.status);
  EXPECT_EQ(reply.content_type, c.want.content_type);
  EXPECT_EQ(reply.body, c.want.body);
}

constexpr const char* kNotFound =
    "not found: try /metrics, /healthz, /readyz, /status or /status.json\n";
constexpr const char* kNotAllowed = "method not allowed: only GET is served\n";

const RouteCase kRoutes[] = {
    {"metrics", "GET", "/metrics", {200, kTextContentType, "page\n"}},
    {"metrics_query_ignored", "GET", "/metrics?x=1", {200, kTextContentType, "page\n"}},
    {"healthz", "GET", "/healthz", {200, kPlainContentType, "ok\n"}},
    {"readyz_without_callback", "GET", "/readyz", {200, kPlainContentType, "ready\n"}},
    {"unknown_path", "GET", "/", {404, kPlainContentType, kNotFound}},
    {"prefix_is_not_a_match", "GET", "/metricsx", {404, kPlainContentType, kNotFound}},
    {"unknown_path_other_method", "DELETE", "/x", {404, kPlainContentType, kNotFound}},
    {"post", "POST", "/metrics", {405, kPlainContentType, kNotAllowed}},
    {"head", "HEAD", "/healthz", {405, kPlainContentType, kNotAllowed}},
};

INSTANTIATE_TEST_SUITE_P(Table, Routes, testing::ValuesIn(kRoutes),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Routes, ReadyzFollowsTheCallback) {
  std::optional<std::string> reason = "upstream 127.0.0.1:5672 unreachable";
  HttpHandlers handlers;
  handlers.not_ready_reason = [&reason] { return reason; };
  HttpReply reply = route_request("GET", "/readyz", handlers);
  EXPECT_EQ(reply.status, 503u);
  EXPECT_EQ(reply.body, "not ready: upstream 127.0.0.1:5672 unreachable\n");
  reason.reset();
  reply = route_request("GET", "/readyz", handlers);
  EXPECT_EQ(reply.status, 200u);
  EXPECT_EQ(reply.body, "ready\n");
}

TEST(Routes, StatusPageAndJsonWhenTheirHandlersAreSet) {
  HttpHandlers handlers;
  EXPECT_EQ(route_request("GET", "/status", handlers).status, 404u);
  EXPECT_EQ(route_request("GET", "/status.json", handlers).status, 404u);
  handlers.status_json = [] { return std::string("{}\n"); };
  handlers.status_page = [] { return std::string_view("<html></html>"); };
  HttpReply reply = route_request("GET", "/status.json?x=1", handlers);
  EXPECT_EQ(reply.status, 200u);
  EXPECT_EQ(reply.content_type, kJsonContentType);
  EXPECT_EQ(reply.body, "{}\n");
  reply = route_request("GET", "/status", handlers);
  EXPECT_EQ(reply.status, 200u);
  EXPECT_EQ(reply.content_type, kHtmlContentType);
  EXPECT_EQ(reply.body, "<html></html>");
  EXPECT_EQ(route_request("POST", "/status", handlers).status, 405u);
  EXPECT_EQ(route_request("GET", "/status/", handlers).status, 404u);
}

TEST(Routes, AThrowingHandlerGives500) {
  HttpHandlers handlers;
  handlers.metrics = []() -> std::string { throw std::runtime_error("boom"); };
  const HttpReply reply = route_request("GET", "/metrics", handlers);
  EXPECT_EQ(reply.status, 500u);
  EXPECT_EQ(reply.body, "internal error: boom\n");
}

}  // namespace
}  // namespace nackguard::metrics
