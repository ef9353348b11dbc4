#include "proxy/net/tls.hpp"

#include <openssl/err.h>
#include <openssl/x509v3.h>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ssl/error.hpp>

namespace nackguard::net {

namespace asio = boost::asio;
namespace ssl = asio::ssl;
using config::ConfigError;
using config::ConfigFile;

namespace {

// OpenSSL's reasons for what just failed, oldest first, each once: "no start line".
std::string take_openssl_errors() {
  std::string reasons;
  while (unsigned long error = ERR_get_error()) {
    const char* reason = ERR_reason_error_string(error);
    const std::string text = reason ? reason : "OpenSSL error " + std::to_string(error);
    if (reasons.find(text) != std::string::npos) continue;
    if (!reasons.empty()) reasons += ", ";
    reasons += text;
  }
  return reasons.empty() ? "no reason given by OpenSSL" : reasons;
}

[[noreturn]] void fail(const ConfigFile& file, const std::string& what, const std::string& fix) {
  throw ConfigError(file.key_location + ": cannot load " + what + " " + file.path.string() + ": " +
                    take_openssl_errors() + "; " + fix);
}

// "listen.tls.cert_file, at FILE:LINE:COLUMN", from "FILE:LINE:COLUMN: listen.tls.cert_file".
std::string key_and_location(const ConfigFile& file) {
  const std::size_t split = file.key_location.rfind(": ");
  if (split == std::string::npos) return file.key_location;
  return file.key_location.substr(split + 2) + ", at " + file.key_location.substr(0, split);
}

// Without a callback OpenSSL would ask for a passphrase on the terminal and block the start.
int refuse_passphrase(char*, int, int, void* asked) {
  if (asked != nullptr) *static_cast<bool*>(asked) = true;
  return 0;
}

std::shared_ptr<ssl::context> new_context(ssl::context::method method) {
  auto context = std::make_shared<ssl::context>(method);
  SSL_CTX* native = context->native_handle();
  SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION);
  SSL_CTX_set_options(native, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
  // An idle consumer connection then holds no TLS read and write buffers.
  SSL_CTX_set_mode(native, SSL_MODE_RELEASE_BUFFERS);
  return context;
}

// The certificate (and its chain) and the key that goes with it.
void load_identity(SSL_CTX* native, const ConfigFile& cert, const ConfigFile& key) {
  ERR_clear_error();
  if (SSL_CTX_use_certificate_chain_file(native, cert.path.c_str()) != 1) {
    fail(cert, "the certificate",
         "give a PEM file with the certificate first, then any intermediates");
  }
  bool passphrase_asked = false;
  SSL_CTX_set_default_passwd_cb(native, refuse_passphrase);
  SSL_CTX_set_default_passwd_cb_userdata(native, &passphrase_asked);
  const int loaded = SSL_CTX_use_PrivateKey_file(native, key.path.c_str(), SSL_FILETYPE_PEM);
  // At once: asio's context deletes any user data left there as its own password callback.
  SSL_CTX_set_default_passwd_cb_userdata(native, nullptr);
  if (loaded != 1 && passphrase_asked) {
    fail(key, "the private key",
         "it is encrypted and nackguard reads no passphrase; give an unencrypted copy "
         "(openssl pkey -in ENCRYPTED -out PLAIN) readable only by nackguard's user");
  }
  if (loaded != 1 || SSL_CTX_check_private_key(native) != 1) {
    const std::string reasons = take_openssl_errors();
    const bool mismatch = reasons.find("mismatch") != std::string::npos ||
                          reasons.find("no certificate assigned") != std::string::npos;
    if (loaded == 1 || mismatch) {
      throw ConfigError(key.key_location + ": the private key " + key.path.string() +
                        " does not match the certificate " + cert.path.string() + " (" +
                        key_and_location(cert) + "): " + reasons +
                        "; give the key the certificate was made for");
    }
    throw ConfigError(key.key_location + ": cannot load the private key " + key.path.string() +
                      ": " + reasons + "; give a PEM file with an unencrypted private key");
  }
}

void load_trusted(SSL_CTX* native, const ConfigFile& ca) {
  ERR_clear_error();
  if (SSL_CTX_load_verify_locations(native, ca.path.c_str(), nullptr) != 1) {
    fail(ca, "the CA certificates", "give a PEM file with one or more CA certificates");
  }
}

std::shared_ptr<ssl::context> listen_context(const config::ListenTls& tls) {
  auto context = new_context(ssl::context::tls_server);
  SSL_CTX* native = context->native_handle();
  load_identity(native, tls.cert_file, tls.key_file);
  // Needed for a client resuming a session once client certificates are asked for.
  static constexpr unsigned char kSessionContext[] = "nackguard";
  SSL_CTX_set_session_id_context(native, kSessionContext, sizeof kSessionContext - 1);
  if (tls.ca_file.empty()) {
    SSL_CTX_set_verify(native, SSL_VERIFY_NONE, nullptr);
    return context;
  }
  load_trusted(native, tls.ca_file);
  // Tells clients which CAs the proxy accepts, so that one with several certificates picks
  // the right one.
  STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(tls.ca_file.path.c_str());
  if (names == nullptr) {
    fail(tls.ca_file, "the CA certificates", "give a PEM file with one or more CA certificates");
  }
  SSL_CTX_set_client_CA_list(native, names);
  int mode = SSL_VERIFY_PEER;
  if (tls.require_client_cert) mode |= SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
  SSL_CTX_set_verify(native, mode, nullptr);
  return context;
}

std::shared_ptr<ssl::context> upstream_context(const config::UpstreamTls& tls) {
  auto context = new_context(ssl::context::tls_client);
  configure_upstream_context(context->native_handle(), tls);
  return context;
}

bool is_ip_address(const std::string& name) {
  boost::system::error_code error;
  asio::ip::make_address(name, error);
  return !error;
}

// The setting a person changes, in the proxy's config or on replay's command line.
struct Names {
  const char* ca_file;
  const char* server_name;
  const char* cert_file;
  const char* port;
};

Names names_for(TlsPeer peer) {
  if (peer == TlsPeer::replay_broker) {
    return {"--ca-file", "--server-name", "--cert-file and --key-file", "the URL's port"};
  }
  return {"upstream.tls.ca_file", "upstream.tls.server_name", "upstream.tls.cert_file and key_file",
          "upstream.port"};
}

// What to check, given OpenSSL's reason and the certificate check's result.
std::string hint(int reason, long verify_result, TlsPeer peer) {
  const bool client = peer == TlsPeer::client;
  const Names names = names_for(peer);
  switch (verify_result) {
    case X509_V_OK:
      break;
    case X509_V_ERR_CERT_HAS_EXPIRED:
    case X509_V_ERR_CERT_NOT_YET_VALID:
      return client ? "the client must present a currently valid certificate"
                    : "renew the broker's certificate (or check this machine's clock)";
    case X509_V_ERR_HOSTNAME_MISMATCH:
    case X509_V_ERR_IP_ADDRESS_MISMATCH:
      return std::string("set ") + names.server_name +
             " to a name the broker's certificate carries";
    default:
      return client ? "the client's certificate must be signed by a CA in listen.tls.ca_file"
                    : std::string(names.ca_file) +
                          " must hold the CA that signed the broker's certificate";
  }
  switch (reason) {
    case SSL_R_WRONG_VERSION_NUMBER:
    case SSL_R_UNKNOWN_PROTOCOL:
    case SSL_R_HTTP_REQUEST:
    case SSL_R_HTTPS_PROXY_REQUEST:
    case SSL_R_PACKET_LENGTH_TOO_LONG:
    case SSL_R_RECORD_LENGTH_MISMATCH:
      return client ? "the client does not seem to speak TLS; this port requires it (listen.tls)"
                    : std::string("the broker does not seem to speak TLS on this port; is ") +
                          names.port + " its TLS port (usually 5671)?";
    case SSL_R_UNSUPPORTED_PROTOCOL:
    case SSL_R_NO_PROTOCOLS_AVAILABLE:
    case SSL_R_TLSV1_ALERT_PROTOCOL_VERSION:
      return "nackguard speaks TLS 1.2 and later only";
    case SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE:
      return "listen.tls.require_client_cert is true: the client must present a certificate";
    case SSL_R_TLSV1_ALERT_UNKNOWN_CA:
    case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED:
      return client ? "the client refused the proxy's certificate (listen.tls.cert_file): give "
                      "the client the CA that signed it, and check its dates and names"
                    : std::string("the broker refused the certificate presented (") +
                          names.cert_file + ")";
    case SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED:
    case SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE:
      return client ? ""
                    : std::string("the broker may require a client certificate (") +
                          names.cert_file + ")";
    default:
      return "";
  }
}

void set_expected_name(X509_VERIFY_PARAM* param, const std::string& name) {
  X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
  if (is_ip_address(name)) {
    X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str());
  } else {
    X509_VERIFY_PARAM_set1_host(param, name.c_str(), name.size());
  }
}

}  // namespace

TlsContexts load_tls(const config::Config& config) {
  TlsContexts contexts;
  if (config.listen_tls) contexts.listen = listen_context(*config.listen_tls);
  if (config.upstream_tls) {
    contexts.upstream = upstream_context(*config.upstream_tls);
    contexts.upstream_server_name = config.upstream_tls->server_name;
    contexts.upstream_verify = config.upstream_tls->verify;
  }
  return contexts;
}

void configure_upstream_context(SSL_CTX* native, const config::UpstreamTls& tls) {
  SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION);
  SSL_CTX_set_options(native, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
  if (tls.verify) {
    if (tls.ca_file.empty()) {
      // /etc/ssl/certs on Debian (or $SSL_CERT_FILE, $SSL_CERT_DIR).
      SSL_CTX_set_default_verify_paths(native);
    } else {
      load_trusted(native, tls.ca_file);
    }
    SSL_CTX_set_verify(native, SSL_VERIFY_PEER, nullptr);
  } else {
    SSL_CTX_set_verify(native, SSL_VERIFY_NONE, nullptr);
  }
  if (!tls.cert_file.empty()) load_identity(native, tls.cert_file, tls.key_file);
}

void expect_broker_identity(SSL* ssl, const TlsContexts& tls, const std::string& address_host) {
  const std::string& name =
      tls.upstream_server_name.empty() ? address_host : tls.upstream_server_name;
  // SNI carries host names only (RFC 6066).
  if (!is_ip_address(name)) SSL_set_tlsext_host_name(ssl, name.c_str());
  if (tls.upstream_verify) set_expected_name(SSL_get0_param(ssl), name);
}

void expect_broker_name(SSL_CTX* context, const std::string& name) {
  set_expected_name(SSL_CTX_get0_param(context), name);
}

std::string describe_handshake_failure(unsigned long openssl_error, long verify_result,
                                       TlsPeer peer) {
  // Its reason strings, in case no context was made in this process yet.
  OPENSSL_init_ssl(OPENSSL_INIT_LOAD_SSL_STRINGS | OPENSSL_INIT_LOAD_CRYPTO_STRINGS, nullptr);
  std::string text;
  if (openssl_error != 0) {
    const char* reason = ERR_reason_error_string(openssl_error);
    text = reason ? reason : "OpenSSL error " + std::to_string(openssl_error);
  } else {
    text = "the connection was closed during the handshake";
  }
  if (verify_result != X509_V_OK) {
    text.append(": ").append(X509_verify_cert_error_string(verify_result));
  }
  const std::string what_to_check = hint(ERR_GET_REASON(openssl_error), verify_result, peer);
  if (!what_to_check.empty()) text.append("; ").append(what_to_check);
  return text;
}

std::string describe_handshake_error(const boost::system::error_code& error, const SSL* ssl,
                                     TlsPeer peer) {
  std::string text;
  int reason = 0;
  if (error.category() == asio::error::get_ssl_category()) {
    reason = ERR_GET_REASON(static_cast<unsigned long>(error.value()));
    const char* openssl = ERR_reason_error_string(static_cast<unsigned long>(error.value()));
    text = openssl ? openssl : error.message();
  } else if (error == ssl::error::stream_truncated || error == asio::error::eof) {
    text = "the connection was closed during the handshake";
  } else {
    text = error.message();
  }
  const long verify_result = ssl ? SSL_get_verify_result(ssl) : X509_V_OK;
  if (verify_result != X509_V_OK) {
    text.append(": ").append(X509_verify_cert_error_string(verify_result));
  }
  const std::string what_to_check = hint(reason, verify_result, peer);
  if (!what_to_check.empty()) text.append("; ").append(what_to_check);
  return text;
}

}  // namespace nackguard::net
