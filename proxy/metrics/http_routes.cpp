#include "proxy/metrics/http_routes.hpp"

#include <exception>

#include "proxy/metrics/text_format.hpp"

namespace nackguard::metrics {

namespace {

HttpReply plain(unsigned status, std::string body) {
  return HttpReply{status, kPlainContentType, std::move(body)};
}

HttpReply answer(std::string_view path, const HttpHandlers& handlers) {
  if (path == "/metrics") {
    return HttpReply{200, kTextContentType, handlers.metrics ? handlers.metrics() : std::string()};
  }
  if (path == "/healthz") return plain(200, "ok\n");
  if (path == "/status.json") return HttpReply{200, kJsonContentType, handlers.status_json()};
  if (path == "/status") {
    return HttpReply{200, kHtmlContentType, std::string(handlers.status_page())};
  }
  std::optional<std::string> reason;
  if (handlers.not_ready_reason) reason = handlers.not_ready_reason();
  if (!reason) return plain(200, "ready\n");
  return plain(503, "not ready: " + *reason + "\n");
}

}  // namespace

HttpReply route_request(std::string_view method, std::string_view target,
                        const HttpHandlers& handlers) {
  const std::string_view path = target.substr(0, target.find('?'));
  const bool status = (path == "/status" && handlers.status_page) ||
                      (path == "/status.json" && handlers.status_json);
  if (path != "/metrics" && path != "/healthz" && path != "/readyz" && !status) {
    return plain(404, "not found: try /metrics, /healthz, /readyz, /status or /status.json\n");
  }
  if (method != "GET") return plain(405, "method not allowed: only GET is served\n");
  try {
    return answer(path, handlers);
  } catch (const std::exception& e) {
    return plain(500, std::string("internal error: ") + e.what() + "\n");
  }
}

}  // namespace nackguard::metrics
