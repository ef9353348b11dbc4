#include "proxy/replay/url.hpp"

#include <cctype>
#include <charconv>

#include "proxy/replay/errors.hpp"

namespace nackguard::replay {

namespace {

[[noreturn]] void bad_url(std::string_view source, std::string_view why) {
  throw Failure("bad " + std::string(source) + " URL: " + std::string(why) +
                " (expected amqp[s]://USER:PASS@HOST:PORT/VHOST[?auth_mechanism=external])");
}

std::string decoded(std::string_view text, std::string_view source, std::string_view part) {
  auto value = percent_decode(text);
  if (!value) {
    bad_url(source, "the " + std::string(part) + " has a malformed %-escape (write % as %25)");
  }
  return *value;
}

std::uint16_t parse_port(std::string_view text, std::string_view source) {
  unsigned value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size() || value == 0 ||
      value > 65535) {
    bad_url(source, "the port must be a number from 1 to 65535");
  }
  return static_cast<std::uint16_t>(value);
}

// Splits HOST[:PORT], where HOST may be a bracketed IPv6 address.
void parse_host_port(std::string_view text, std::string_view source, ParsedUrl& out) {
  std::string_view host = text;
  std::string_view port;
  bool has_port = false;
  if (text.starts_with('[')) {
    std::size_t close = text.find(']');
    if (close == std::string_view::npos) bad_url(source, "an IPv6 address lacks its ']'");
    host = text.substr(1, close - 1);
    std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':') bad_url(source, "unexpected text after the IPv6 address");
      port = rest.substr(1);
      has_port = true;
    }
  } else if (std::size_t colon = text.rfind(':'); colon != std::string_view::npos) {
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    has_port = true;
  }
  out.host = decoded(host, source, "host");
  if (out.host.empty()) bad_url(source, "the host is missing");
  if (has_port) out.port = parse_port(port, source);
}

void split_credentials(std::string_view userinfo, std::string_view source, std::string& user,
                       std::string& password) {
  std::size_t colon = userinfo.find(':');
  user = decoded(userinfo.substr(0, colon), source, "user name");
  password = colon == std::string_view::npos
                 ? std::string()
                 : decoded(userinfo.substr(colon + 1), source, "password");
}

// The query: auth_mechanism=external (or plain), as in RabbitMQ's URI specification.
void parse_query(std::string_view query, std::string_view source, ParsedUrl& out) {
  while (!query.empty()) {
    const std::size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    const std::size_t eq = pair.find('=');
    const std::string key = decoded(pair.substr(0, eq), source, "query");
    std::string value = eq == std::string_view::npos
                            ? std::string()
                            : decoded(pair.substr(eq + 1), source, "query");
    for (char& c : value) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (key != "auth_mechanism") {
      bad_url(source, "the only query parameter understood is auth_mechanism");
    }
    if (value != "external" && value != "plain") {
      bad_url(source, "auth_mechanism must be external or plain");
    }
    out.external = value == "external";
  }
}

}  // namespace

std::string Upstream::endpoint() const {
  std::string text = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return text + ":" + std::to_string(port);
}

std::optional<std::string> percent_decode(std::string_view text) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    if (text.size() - i < 3) return std::nullopt;
    int high = hex(text[i + 1]);
    int low = hex(text[i + 2]);
    if (high < 0 || low < 0) return std::nullopt;
    out += static_cast<char>(high * 16 + low);
    i += 2;
  }
  return out;
}

ParsedUrl parse_amqp_url(std::string_view url, std::string_view source) {
  ParsedUrl out;
  std::string_view rest;
  if (url.starts_with("amqps://")) {
    out.tls = true;
    out.port = kDefaultAmqpsPort;
    rest = url.substr(8);
  } else if (url.starts_with("amqp://")) {
    rest = url.substr(7);
  } else {
    bad_url(source, "it must start with amqp:// or amqps://");
  }
  if (rest.find('#') != std::string_view::npos)
    bad_url(source, "fragments (#...) are not supported");
  if (std::size_t question = rest.find('?'); question != std::string_view::npos) {
    parse_query(rest.substr(question + 1), source, out);
    rest = rest.substr(0, question);
  }

  std::size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view() : rest.substr(slash);

  if (std::size_t at = authority.rfind('@'); at != std::string_view::npos) {
    std::string user, password;
    split_credentials(authority.substr(0, at), source, user, password);
    if (user.empty()) bad_url(source, "the user name before '@' is empty");
    out.user = std::move(user);
    out.password = std::move(password);
    authority = authority.substr(at + 1);
  }
  parse_host_port(authority, source, out);

  if (path.size() > 1) {
    std::string_view vhost = path.substr(1);
    if (vhost.find('/') != std::string_view::npos) {
      bad_url(source, "a '/' inside the vhost must be written %2F");
    }
    out.vhost = decoded(vhost, source, "vhost");
  }
  return out;
}

Upstream resolve_upstream(const std::optional<std::string>& cli,
                          const std::optional<std::string>& env) {
  const std::string env_name(kUpstreamEnv);
  std::optional<ParsedUrl> from_cli;
  if (cli) from_cli = parse_amqp_url(*cli, "--upstream");

  std::optional<ParsedUrl> from_env;
  std::optional<std::string> env_user;
  std::optional<std::string> env_password;
  if (env && !env->empty()) {
    if (env->find("://") != std::string::npos) {
      from_env = parse_amqp_url(*env, env_name);
      env_user = from_env->user;
      env_password = from_env->password;
    } else if (env->find(':') == std::string::npos) {
      throw Failure(env_name + " must hold an amqp:// or amqps:// URL, or USER:PASSWORD");
    } else {
      std::string user, password;
      split_credentials(*env, env_name, user, password);
      if (user.empty()) throw Failure(env_name + ": the user name before ':' is empty");
      env_user = std::move(user);
      env_password = std::move(password);
    }
  }

  const ParsedUrl* address = from_cli ? &*from_cli : from_env ? &*from_env : nullptr;
  if (address == nullptr) {
    throw UsageError("no broker given: pass --upstream amqp://HOST:PORT/VHOST, or set " + env_name +
                     " to a whole amqp:// or amqps:// URL");
  }
  Upstream upstream;
  upstream.host = address->host;
  upstream.port = address->port;
  upstream.vhost = address->vhost;
  upstream.tls = address->tls;
  upstream.external = address->external;
  if (from_cli && from_cli->user) {
    upstream.user = *from_cli->user;
    upstream.password = from_cli->password.value_or("");
  } else if (env_user) {
    upstream.user = *env_user;
    upstream.password = env_password.value_or("");
  }
  return upstream;
}

}  // namespace nackguard::replay
