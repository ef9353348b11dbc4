#pragma once
// What the metrics endpoint answers, without sockets: method and target in, status and body
// out. GET /metrics, /healthz, /readyz, /status (an HTML page) and /status.json; 404 for any
// other path, 405 for any other method.

#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace nackguard::metrics {

struct HttpHandlers {
  // The body of GET /metrics, e.g. Registry::render. Unset: an empty page.
  std::function<std::string()> metrics;
  // Why the proxy is not ready (GET /readyz answers 503 with it), or nullopt when it is.
  // Unset: always ready.
  std::function<std::optional<std::string>()> not_ready_reason;
  // The bodies of GET /status.json and GET /status. Unset: 404.
  std::function<std::string()> status_json;
  std::function<std::string_view()> status_page;
};

struct HttpReply {
  unsigned status = 200;
  std::string_view content_type;
  std::string body;
};

inline constexpr std::string_view kPlainContentType = "text/plain; charset=utf-8";
inline constexpr std::string_view kHtmlContentType = "text/html; charset=utf-8";
inline constexpr std::string_view kJsonContentType = "application/json";

// `target` may carry a query string, which is ignored. A handler that throws gives 500.
HttpReply route_request(std::string_view method, std::string_view target,
                        const HttpHandlers& handlers);

}  // namespace nackguard::metrics
