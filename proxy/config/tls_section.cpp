#include "proxy/config/tls_section.hpp"

#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string_view>
#include <system_error>

#include "proxy/config/suggest.hpp"
#include "proxy/config/yaml_values.hpp"

namespace nackguard::config::detail {
namespace {

namespace fs = std::filesystem;

constexpr std::array<std::string_view, 4> kListenTlsKeys{"cert_file", "key_file", "ca_file",
                                                         "require_client_cert"};
constexpr std::array<std::string_view, 5> kUpstreamTlsKeys{"ca_file", "verify", "server_name",
                                                           "cert_file", "key_file"};
// Why `path` cannot be opened for reading; empty when it can.
std::string unreadable_because(const fs::path& path) {
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (status.type() == fs::file_type::not_found) return "does not exist";
  if (error) return "cannot be checked (" + error.message() + ")";
  if (status.type() == fs::file_type::directory) return "is a directory, not a file";
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::string("cannot be read (") + std::strerror(errno) + ")";
  return {};
}

// `tls:` with nothing after it is most likely a half-finished edit: refuse it rather than
// guess whether TLS was meant.
void check_not_empty(const Section& parent, std::string_view expected_keys) {
  const Field* tls = parent.find("tls");
  if (tls != nullptr && tls->value().IsNull()) {
    tls->fail("expected a map with the keys " + std::string(expected_keys) +
              ", got nothing; remove tls for plain TCP");
  }
}

}  // namespace

ConfigFile read_config_file(const Source& source, const Section& section, std::string_view key,
                            const fs::path& config_file, std::string_view what) {
  const Field* field = section.find(key);
  if (field == nullptr) return {};
  const std::string text = field->scalar("a file path");
  if (text.empty()) field->fail("expected a file path, got an empty string");
  const fs::path as_written = text;
  ConfigFile file;
  file.path = as_written.is_absolute()
                  ? as_written.lexically_normal()
                  : (config_file.parent_path() / as_written).lexically_normal();
  file.key_location = source.location(field->value_mark()) + ": " + field->dotted_key();
  const std::string problem = unreadable_because(file.path);
  if (problem.empty()) return file;
  std::string origin = "set to " + quote(text);
  if (as_written.is_relative()) origin += ", relative to " + config_file.parent_path().string();
  field->fail(std::string(what) + " " + file.path.string() + " " + problem + " (" + origin +
              "); fix the path, or let the user running nackguard read the file");
}

void read_listen_tls(const Source& source, const Section& listen, Config& config) {
  const Field* field = listen.find("tls");
  if (field == nullptr) return;
  check_not_empty(listen, join(kListenTlsKeys));
  const Section tls = listen.child("tls", kListenTlsKeys);
  ListenTls settings;
  settings.cert_file =
      read_config_file(source, tls, "cert_file", config.file, "the certificate file");
  settings.key_file =
      read_config_file(source, tls, "key_file", config.file, "the private key file");
  settings.ca_file = read_config_file(source, tls, "ca_file", config.file, "the CA file");
  const Field* require = tls.find("require_client_cert");
  if (require != nullptr) settings.require_client_cert = read_bool(*require);
  if (settings.cert_file.empty() || settings.key_file.empty()) {
    const char* missing = settings.cert_file.empty() && settings.key_file.empty()
                              ? "cert_file and key_file are"
                          : settings.cert_file.empty() ? "cert_file is"
                                                       : "key_file is";
    field->fail(std::string(missing) +
                " missing; TLS towards clients needs the proxy's certificate (cert_file) and "
                "its private key (key_file), both PEM files");
  }
  if (settings.require_client_cert && settings.ca_file.empty()) {
    require->fail(
        "true needs listen.tls.ca_file, the PEM file of the CAs that sign the clients' "
        "certificates");
  }
  config.listen_tls = std::move(settings);
}

void read_upstream_tls(const Source& source, const Section& upstream, Config& config) {
  if (upstream.find("tls") == nullptr) return;
  check_not_empty(upstream, join(kUpstreamTlsKeys) + " (or {} for the defaults)");
  const Section tls = upstream.child("tls", kUpstreamTlsKeys);
  UpstreamTls settings;
  if (const Field* verify = tls.find("verify")) settings.verify = read_bool(*verify);
  settings.ca_file = read_config_file(source, tls, "ca_file", config.file, "the CA file");
  // With several addresses, each connection checks the name of the address it connects to.
  if (config.upstream_addresses.empty()) settings.server_name = config.upstream.host;
  if (const Field* name = tls.find("server_name")) {
    settings.server_name = read_word(*name, "a host name");
  }
  settings.cert_file =
      read_config_file(source, tls, "cert_file", config.file, "the certificate file");
  settings.key_file =
      read_config_file(source, tls, "key_file", config.file, "the private key file");
  if (settings.cert_file.empty() != settings.key_file.empty()) {
    const Field* given = tls.find(settings.cert_file.empty() ? "key_file" : "cert_file");
    given->fail(std::string("set without ") +
                (settings.cert_file.empty() ? "cert_file" : "key_file") +
                "; a client certificate needs both cert_file and key_file (PEM files), or "
                "neither");
  }
  config.upstream_tls = std::move(settings);
}

}  // namespace nackguard::config::detail
