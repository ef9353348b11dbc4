#include "proxy/config/management_section.hpp"

#include <array>

#include "proxy/config/suggest.hpp"
#include "proxy/config/tls_section.hpp"
#include "proxy/config/upstream_addresses.hpp"
#include "proxy/config/yaml_values.hpp"

namespace nackguard::config::detail {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

constexpr std::array<std::string_view, 8> kManagementKeys{
    "url", "username", "password", "password_file", "refresh", "timeout", "verify", "ca_file"};
constexpr std::string_view kUrlExample = "http://127.0.0.1:15672";
// Asking more often than each second only loads the broker; a day is the longest a limit
// changed by a policy may stay unseen.
constexpr milliseconds kShortestRefresh = std::chrono::seconds(1);
constexpr milliseconds kLongestRefresh = std::chrono::hours(24);
constexpr milliseconds kShortestTimeout{1};
constexpr milliseconds kLongestTimeout = std::chrono::minutes(5);

// Whether the authority names a port: "host:1", "[::1]:1"; not "host" nor "[::1]".
bool has_port(std::string_view authority) {
  if (authority.starts_with('[')) {
    const std::size_t close = authority.find(']');
    return close != std::string_view::npos && close + 1 < authority.size();
  }
  return authority.find(':') != std::string_view::npos;
}

std::string read_password_file(const Field& field, const ConfigFile& file) {
  std::string password = read_text_file(file.path, "password file");
  while (!password.empty() && (password.back() == '\n' || password.back() == '\r')) {
    password.pop_back();
  }
  if (password.empty()) {
    field.fail("the password file " + file.path.string() +
               " is empty; write the management user's password in it");
  }
  return password;
}

void read_password(const Source& source, const Section& section, const Field& management,
                   const fs::path& config_file, UpstreamManagement& out) {
  const Field* password = section.find("password");
  const Field* password_file = section.find("password_file");
  if (password != nullptr && password_file != nullptr) {
    password->fail(
        "set together with upstream.management.password_file; keep password_file "
        "(a file only nackguard's user may read, e.g. a Kubernetes secret) and "
        "remove password");
  }
  if (password != nullptr) {
    out.password = password->scalar("the management user's password");
    if (out.password.empty()) password->fail("expected a password, got an empty string");
    return;
  }
  if (password_file == nullptr) {
    management.fail(
        "password_file is missing; name the file holding the password of "
        "upstream.management.username (or give password, which is discouraged)");
  }
  out.password_file =
      read_config_file(source, section, "password_file", config_file, "the password file");
  out.password = read_password_file(*password_file, out.password_file);
}

// verify and ca_file say how to check an https server: with http they would silently do
// nothing.
void read_https_keys(const Source& source, const Section& section, const fs::path& config_file,
                     UpstreamManagement& out) {
  const Field* verify = section.find("verify");
  const Field* ca_file = section.find("ca_file");
  for (const Field* key : {verify, ca_file}) {
    if (key != nullptr && !out.https) {
      key->fail("applies to https URLs only, and upstream.management.url is " + quote(out.url) +
                "; remove it, or use https");
    }
  }
  if (verify != nullptr) out.verify = read_bool(*verify);
  out.ca_file = read_config_file(source, section, "ca_file", config_file, "the CA file");
}

}  // namespace

std::optional<ManagementUrl> parse_management_url(std::string_view text, std::string& why) {
  ManagementUrl url;
  std::string_view rest;
  if (text.starts_with("http://")) {
    rest = text.substr(7);
  } else if (text.starts_with("https://")) {
    url.https = true;
    rest = text.substr(8);
  } else {
    why = "it must start with http:// or https://";
    return std::nullopt;
  }
  if (rest.find_first_of("?#") != std::string_view::npos) {
    why = "a query or fragment has no place in it";
    return std::nullopt;
  }
  const std::size_t slash = rest.find('/');
  const std::string_view authority = rest.substr(0, slash);
  if (authority.find('@') != std::string_view::npos) {
    why = "credentials do not belong in the URL: set username and password_file";
    return std::nullopt;
  }
  std::string host_port(authority);
  if (!has_port(authority)) host_port += url.https ? ":443" : ":80";
  std::optional<Endpoint> endpoint = parse_host_port(host_port, why);
  if (!endpoint) return std::nullopt;
  url.endpoint = std::move(*endpoint);
  std::string_view path = slash == std::string_view::npos ? "" : rest.substr(slash);
  while (path.ends_with('/')) path.remove_suffix(1);
  if (path.ends_with("/api")) {
    why = "give the management plugin's own URL, without /api";
    return std::nullopt;
  }
  url.path_prefix = std::string(path);
  return url;
}

void read_upstream_management(const Source& source, const Section& upstream, Config& config) {
  const Field* management = upstream.find("management");
  if (management == nullptr) return;
  if (management->value().IsNull()) {
    management->fail("expected a map with the keys " + join(kManagementKeys) +
                     ", got nothing; remove management to look no delivery limit up");
  }
  const Section section = upstream.child("management", kManagementKeys);
  UpstreamManagement out;
  out.location = source.location(management->key_mark());
  const Field* url = section.find("url");
  if (url == nullptr) {
    management->fail("url is missing; give the management API's URL, such as " +
                     std::string(kUrlExample) + ", or remove management");
  }
  out.url = read_word(*url, "a URL such as " + std::string(kUrlExample));
  std::string why;
  std::optional<ManagementUrl> parsed = parse_management_url(out.url, why);
  if (!parsed) {
    url->fail("expected a URL such as " + std::string(kUrlExample) +
              " or https://rabbit.example:15671, got " + quote(out.url) + ": " + why);
  }
  out.https = parsed->https;
  out.endpoint = std::move(parsed->endpoint);
  out.path_prefix = std::move(parsed->path_prefix);
  const Field* username = section.find("username");
  if (username == nullptr) {
    management->fail(
        "username is missing; give a RabbitMQ user with the monitoring tag (or "
        "read access to the vhosts)");
  }
  out.username = read_word(*username, "a RabbitMQ user name");
  if (out.username.find(':') != std::string::npos) {
    username->fail("holds a colon, which HTTP basic authentication cannot carry");
  }
  read_password(source, section, *management, config.file, out);
  if (const Field* refresh = section.find("refresh")) {
    out.refresh = read_duration(*refresh, kShortestRefresh, kLongestRefresh);
  }
  if (const Field* timeout = section.find("timeout")) {
    out.timeout = read_duration(*timeout, kShortestTimeout, kLongestTimeout);
  }
  read_https_keys(source, section, config.file, out);
  config.upstream_management = std::move(out);
}

}  // namespace nackguard::config::detail
