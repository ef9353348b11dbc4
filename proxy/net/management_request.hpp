#pragma once
// RabbitMQ's management API as nackguard asks it, without I/O: the request targets, the
// basic authorization, and what an answer means, with the words a person needs when it is
// not the one hoped for. net::ManagementClient carries the requests out.

#include <string>
#include <string_view>

#include "proxy/config/config.hpp"
#include "proxy/retry/learnt_limits.hpp"

namespace nackguard::net {

// A path segment with every byte outside RFC 3986's unreserved ones percent-encoded: "/" is
// "%2F", so the default vhost reads /api/queues/%2F/NAME.
std::string encode_path_segment(std::string_view text);

// "PREFIX/api/queues/VHOST/NAME" and "PREFIX/api/overview".
std::string queue_target(std::string_view path_prefix, const retry::QueueKey& key);
std::string overview_target(std::string_view path_prefix);

// "Basic " and the base64 of "username:password".
std::string basic_authorization(std::string_view username, std::string_view password);

// Where the API is and where the config names it, for messages.
struct ManagementSite {
  std::string address;   // "host:port"
  std::string location;  // "FILE:LINE:COLUMN" of upstream.management
};
ManagementSite site_of(const config::UpstreamManagement& api);

// What one lookup came to.
struct LookupAnswer {
  enum class Kind : std::uint8_t { limit, not_found, no_statistics, failure };
  Kind kind = Kind::failure;
  retry::QueueLimit limit;   // limit
  std::string failure_kind;  // failure: "http 401", "bad response", "connect", ...
  std::string failure;       // failure: what happened, where, and what to do
};

// A failure that is not an HTTP answer: `kind` ("connect", "timeout", "tls", ...) and what
// happened (an error's message), with what to check.
LookupAnswer transport_failure(const ManagementSite& site, std::string_view kind,
                               std::string_view what);

// An answer other than 200 to GET `target`.
LookupAnswer http_failure(const ManagementSite& site, std::string_view target, unsigned status,
                          std::string_view body);

// A 200 whose body is not what the API sends; `problem` says what is wrong with it.
LookupAnswer bad_response(const ManagementSite& site, std::string_view target,
                          std::string_view problem);

// What GET /api/queues/VHOST/NAME answered: 200 with the queue, 404, or anything else.
LookupAnswer read_queue_answer(const ManagementSite& site, std::string_view target, unsigned status,
                               std::string_view body, retry::BrokerVersion version);

}  // namespace nackguard::net
