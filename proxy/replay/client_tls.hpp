#pragma once
// TLS and connection diagnosis for the replay's rabbitmq-c client. The OpenSSL context is
// rabbitmq-c's; it gets the proxy's own upstream.tls settings (proxy/net/tls.hpp), and a
// failed handshake is told in the same words, naming the command-line options instead.

#include <amqp.h>
#include <openssl/x509_vfy.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "proxy/replay/amqp_client.hpp"

namespace nackguard::replay {

// Filled during the handshake: the certificate check's first error.
struct TlsFailure {
  long verify_result = X509_V_OK;
};

// Sets up rabbitmq-c's SSL socket before it connects: TLS 1.2 and later, the trusted CAs and
// verification (on unless tls.verify is false), the name the broker's certificate must carry
// (tls.server_name, else `host`), and the client certificate. `failure` must outlive the
// connect. Throws Failure naming the option when a file does not load.
void configure_tls(amqp_socket_t* socket, const TlsSettings& tls, const std::string& host,
                   TlsFailure& failure);

// After a failed handshake: OpenSSL's reason and what to check.
std::string describe_tls_failure(const TlsFailure& failure);

// rabbitmq-c reports a failed connect without its cause: this connects once more, and throws
// Failure naming host:port and the cause (refused, no answer, unknown host). Returns when the
// connection now succeeds.
void diagnose_connect(const std::string& host, std::uint16_t port,
                      std::chrono::milliseconds timeout);

}  // namespace nackguard::replay
