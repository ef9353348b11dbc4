// What a failed handshake with the broker tells a person: the same words for the proxy and
// for `nackguard replay`, each naming the setting it can change.
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>

#include <gtest/gtest.h>

#include "proxy/net/tls.hpp"

namespace nackguard::net {
namespace {

unsigned long ssl_error(int reason) {
  return ERR_PACK(ERR_LIB_SSL, 0, reason);
}

TEST(DescribeHandshakeFailure, NamesTheProxysSettings) {
  const std::string unknown_ca =
      describe_handshake_failure(ssl_error(SSL_R_CERTIFICATE_VERIFY_FAILED),
                                 X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY, TlsPeer::broker);
  EXPECT_NE(unknown_ca.find("certificate verify failed"), std::string::npos) << unknown_ca;
  EXPECT_NE(unknown_ca.find("upstream.tls.ca_file must hold the CA"), std::string::npos)
      << unknown_ca;
  const std::string plain_port =
      describe_handshake_failure(ssl_error(SSL_R_WRONG_VERSION_NUMBER), X509_V_OK, TlsPeer::broker);
  EXPECT_NE(plain_port.find("is upstream.port its TLS port"), std::string::npos) << plain_port;
}

TEST(DescribeHandshakeFailure, NamesReplaysOptions) {
  const std::string unknown_ca = describe_handshake_failure(
      ssl_error(SSL_R_CERTIFICATE_VERIFY_FAILED), X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY,
      TlsPeer::replay_broker);
  EXPECT_NE(unknown_ca.find("--ca-file must hold the CA"), std::string::npos) << unknown_ca;
  const std::string name =
      describe_handshake_failure(ssl_error(SSL_R_CERTIFICATE_VERIFY_FAILED),
                                 X509_V_ERR_HOSTNAME_MISMATCH, TlsPeer::replay_broker);
  EXPECT_NE(name.find("hostname mismatch; set --server-name"), std::string::npos) << name;
  const std::string plain_port = describe_handshake_failure(ssl_error(SSL_R_WRONG_VERSION_NUMBER),
                                                            X509_V_OK, TlsPeer::replay_broker);
  EXPECT_NE(plain_port.find("is the URL's port its TLS port"), std::string::npos) << plain_port;
  const std::string refused = describe_handshake_failure(
      ssl_error(SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED), X509_V_OK, TlsPeer::replay_broker);
  EXPECT_NE(refused.find("(--cert-file and --key-file)"), std::string::npos) << refused;
  for (const std::string& text : {unknown_ca, name, plain_port, refused}) {
    EXPECT_EQ(text.find("upstream."), std::string::npos) << text;
  }
}

TEST(DescribeHandshakeFailure, ACloseWithoutAnErrorSaysSo) {
  EXPECT_EQ(describe_handshake_failure(0, X509_V_OK, TlsPeer::replay_broker),
            "the connection was closed during the handshake");
}

}  // namespace
}  // namespace nackguard::net
