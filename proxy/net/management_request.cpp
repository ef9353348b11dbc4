#include "proxy/net/management_request.hpp"

#include <openssl/evp.h>

#include <vector>

namespace nackguard::net {

namespace {

bool unreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_' || c == '~';
}

// An answer's body in a message: its start, on one line.
std::string excerpt(std::string_view body) {
  constexpr std::size_t kMax = 200;
  std::string out;
  for (char c : body.substr(0, kMax)) out += (c == '\n' || c == '\r') ? ' ' : c;
  if (body.size() > kMax) out += "...";
  return out;
}

std::string config_hint(const ManagementSite& site) {
  return "upstream.management in " + site.location;
}

LookupAnswer failure(std::string kind, std::string what) {
  LookupAnswer answer;
  answer.failure_kind = std::move(kind);
  answer.failure = std::move(what);
  return answer;
}

}  // namespace

std::string encode_path_segment(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (unreserved(byte)) {
      out += c;
    } else {
      out += '%';
      out += kHex[byte >> 4];
      out += kHex[byte & 15];
    }
  }
  return out;
}

std::string queue_target(std::string_view path_prefix, const retry::QueueKey& key) {
  return std::string(path_prefix) + "/api/queues/" + encode_path_segment(key.vhost) + "/" +
         encode_path_segment(key.queue);
}

std::string overview_target(std::string_view path_prefix) {
  return std::string(path_prefix) + "/api/overview";
}

std::string basic_authorization(std::string_view username, std::string_view password) {
  const std::string credentials = std::string(username) + ":" + std::string(password);
  std::vector<unsigned char> encoded(4 * ((credentials.size() + 2) / 3) + 1);
  const int n =
      EVP_EncodeBlock(encoded.data(), reinterpret_cast<const unsigned char*>(credentials.data()),
                      static_cast<int>(credentials.size()));
  return "Basic " + std::string(reinterpret_cast<const char*>(encoded.data()), n);
}

ManagementSite site_of(const config::UpstreamManagement& api) {
  return {config::to_string(api.endpoint), api.location};
}

LookupAnswer transport_failure(const ManagementSite& site, std::string_view kind,
                               std::string_view what) {
  std::string advice;
  if (kind == "timeout") {
    advice =
        "it did not answer within upstream.management.timeout; raise it, or check the "
        "node's load";
  } else if (kind == "tls") {
    advice =
        "check upstream.management.ca_file and verify, and that the URL's host is a name "
        "its certificate carries";
  } else {
    advice = "is the rabbitmq_management plugin enabled and listening there? check the url";
  }
  return failure(std::string(kind), "the management API at " + site.address + ": " +
                                        std::string(what) + "; " + advice + " (" +
                                        config_hint(site) + ")");
}

LookupAnswer http_failure(const ManagementSite& site, std::string_view target, unsigned status,
                          std::string_view body) {
  std::string what = "the management API at " + site.address + " answered " +
                     std::to_string(status) + " to GET " + std::string(target);
  if (!body.empty()) what += " (" + excerpt(body) + ")";
  if (status == 401 || status == 403) {
    what += "; check upstream.management.username and its password (" + config_hint(site) +
            "): the user needs the monitoring tag and permissions on the vhost (rabbitmqctl "
            "set_permissions -p VHOST USER '' '' '' is enough)";
  } else if (status == 404) {
    what += "; check that upstream.management.url (" + config_hint(site) +
            ") is the management plugin's own URL";
  }
  return failure("http " + std::to_string(status), std::move(what));
}

LookupAnswer read_queue_answer(const ManagementSite& site, std::string_view target, unsigned status,
                               std::string_view body, retry::BrokerVersion version) {
  LookupAnswer answer;
  if (status == 404) {
    answer.kind = LookupAnswer::Kind::not_found;
    return answer;
  }
  if (status != 200) return http_failure(site, target, status, body);
  retry::QueueJsonReading reading = retry::read_queue_json(body, version);
  switch (reading.outcome) {
    case retry::QueueJsonReading::Outcome::ok:
      answer.kind = LookupAnswer::Kind::limit;
      answer.limit = reading.limit;
      return answer;
    case retry::QueueJsonReading::Outcome::no_statistics_yet:
      answer.kind = LookupAnswer::Kind::no_statistics;
      return answer;
    case retry::QueueJsonReading::Outcome::malformed:
      break;
  }
  return bad_response(site, target, reading.problem);
}

LookupAnswer bad_response(const ManagementSite& site, std::string_view target,
                          std::string_view problem) {
  return failure("bad response", "the management API at " + site.address + " answered GET " +
                                     std::string(target) + ": " + std::string(problem) +
                                     "; check that upstream.management.url (" + config_hint(site) +
                                     ") is the management plugin's own URL");
}

}  // namespace nackguard::net
