#include "proxy/config/upstream_addresses.hpp"

#include <algorithm>
#include <charconv>

namespace nackguard::config::detail {
namespace {

constexpr std::string_view kExample = "[\"rabbit-0.rabbit:5672\", \"rabbit-1.rabbit:5672\"]";

bool valid_host(std::string_view host) {
  return !host.empty() && host.find_first_of(" \t[]/") == std::string_view::npos;
}

// One list element, with what is needed to complain about it at its own line.
Field element_field(const Source& source, std::size_t index, const YAML::Node& element) {
  return Field(source, "upstream.addresses[" + std::to_string(index) + "]", element, element);
}

[[noreturn]] void fail_both_set(const Field& addresses, const Section& upstream) {
  const Field* host = upstream.find("host");
  const Field* other = host != nullptr ? host : upstream.find("port");
  addresses.fail("set together with " + other->dotted_key() + " (line " +
                 std::to_string(other->key_mark().line + 1) +
                 "); use one of them: upstream.addresses for several broker nodes, or "
                 "upstream.host and upstream.port for one");
}

}  // namespace

std::optional<Endpoint> parse_host_port(std::string_view text, std::string& why) {
  std::string_view host;
  std::string_view port;
  if (text.starts_with('[')) {
    const std::size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      why = "an IPv6 address is written [address]:port";
      return std::nullopt;
    }
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const std::size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) {
      why = "the port is missing";
      return std::nullopt;
    }
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) {
      why = "an IPv6 address is written [address]:port";
      return std::nullopt;
    }
  }
  if (!valid_host(host)) {
    why = "the host name is empty or holds a space, a slash or a bracket";
    return std::nullopt;
  }
  unsigned value = 0;
  const auto [end, error] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || error != std::errc() || end != port.data() + port.size() || value == 0 ||
      value > 65535) {
    why = "the port must be a number from 1 to 65535";
    return std::nullopt;
  }
  return Endpoint{std::string(host), static_cast<std::uint16_t>(value)};
}

void read_upstream_addresses(const Source& source, const Section& upstream, Config& config) {
  const Field* field = upstream.find("addresses");
  if (field == nullptr) return;
  if (upstream.find("host") != nullptr || upstream.find("port") != nullptr) {
    fail_both_set(*field, upstream);
  }
  const YAML::Node& list = field->value();
  if (!list.IsSequence()) {
    field->fail("expected a list of \"host:port\" strings such as " + std::string(kExample) +
                ", got " + describe_node(list));
  }
  if (list.size() == 0) {
    field->fail(
        "expected at least one \"host:port\", got an empty list; list the broker nodes, "
        "or remove upstream.addresses to use upstream.host and upstream.port");
  }
  if (list.size() > kMaxUpstreamAddresses) {
    field->fail("expected at most " + std::to_string(kMaxUpstreamAddresses) + " addresses, got " +
                std::to_string(list.size()) +
                "; list a few nodes of the cluster, or put a load balancer in front of them");
  }
  std::vector<Endpoint> addresses;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const Field element = element_field(source, i, list[i]);
    const std::string text = element.scalar("\"host:port\"");
    std::string why;
    std::optional<Endpoint> endpoint = parse_host_port(text, why);
    if (!endpoint) {
      element.fail("expected \"host:port\" such as \"rabbit-0.rabbit:5672\", got " + quote(text) +
                   ": " + why);
    }
    const auto same = [&](const Endpoint& e) {
      return e.host == endpoint->host && e.port == endpoint->port;
    };
    if (const auto it = std::find_if(addresses.begin(), addresses.end(), same);
        it != addresses.end()) {
      element.fail(quote(text) + " is listed twice (also upstream.addresses[" +
                   std::to_string(it - addresses.begin()) + "]); list each address once");
    }
    addresses.push_back(std::move(*endpoint));
  }
  config.upstream = addresses.front();
  config.upstream_addresses = std::move(addresses);
}

}  // namespace nackguard::config::detail
