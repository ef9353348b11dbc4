#pragma once
// TLS for both sides (docs/tls.md): OpenSSL contexts built from listen.tls and upstream.tls at
// start, so that a certificate or key OpenSSL refuses stops the start like any other config
// error; and the words a person needs when a handshake fails.

#include <openssl/ssl.h>

#include <boost/asio/ssl/context.hpp>
#include <boost/system/error_code.hpp>
#include <memory>
#include <string>

#include "proxy/config/config.hpp"

namespace nackguard::net {

struct TlsContexts {
  // listen.tls: every client must speak TLS. nullptr: plain TCP.
  std::shared_ptr<boost::asio::ssl::context> listen;
  // upstream.tls. nullptr: plain TCP to the broker.
  std::shared_ptr<boost::asio::ssl::context> upstream;
  // Sent as SNI (unless an IP address), and the name the broker's certificate must carry.
  // Empty: the host name of the address being connected to.
  std::string upstream_server_name;
  bool upstream_verify = true;
};

// TLS 1.2 and later only. Throws config::ConfigError naming the key (file:line:column), the
// file and OpenSSL's reason: a file that is not PEM, an encrypted key, a key that does not
// match its certificate. Contexts are shared by every connection (OpenSSL allows that).
TlsContexts load_tls(const config::Config& config);

// upstream.tls's settings on an OpenSSL client context (also `nackguard replay`'s, whose
// context rabbitmq-c creates): TLS 1.2 and later, the trusted CAs and verification, the
// client certificate. Throws config::ConfigError as load_tls does.
void configure_upstream_context(SSL_CTX* context, const config::UpstreamTls& tls);

// The name (or IP address) the broker's certificate must carry, for every connection made
// from `context`.
void expect_broker_name(SSL_CTX* context, const std::string& name);

// Before the handshake with the broker at `address_host`: SNI, and the host name (or IP
// address) its certificate is checked against when verifying: upstream.tls.server_name when
// set, else `address_host`.
void expect_broker_identity(SSL* ssl, const TlsContexts& tls, const std::string& address_host);

// Which end a handshake was with; it decides what a person should check. replay_broker: the
// broker, seen by `nackguard replay`, whose settings are command-line options.
enum class TlsPeer { client, broker, replay_broker };

// Why a handshake failed in OpenSSL's words, with the certificate check's result when that
// failed and what to check, e.g. "certificate verify failed: certificate has expired; renew
// the broker's certificate".
std::string describe_handshake_error(const boost::system::error_code& error, const SSL* ssl,
                                     TlsPeer peer);
// The same from OpenSSL's first error code (0: none, the peer closed) and the certificate
// check's result.
std::string describe_handshake_failure(unsigned long openssl_error, long verify_result,
                                       TlsPeer peer);

}  // namespace nackguard::net
