#include "proxy/replay/client_tls.hpp"

#include <amqp_ssl_socket.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <optional>

#include "proxy/config/config.hpp"
#include "proxy/net/tls.hpp"
#include "proxy/replay/errors.hpp"

namespace nackguard::replay {

namespace {

namespace asio = boost::asio;
using boost::system::error_code;
using tcp = asio::ip::tcp;

// Records the first certificate error for describe_tls_failure, and fails the handshake then.
int record_verify_result(int preverify_ok, X509_STORE_CTX* store) {
  if (preverify_ok == 1) return 1;
  auto* ssl =
      static_cast<SSL*>(X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx()));
  auto* failure =
      ssl ? static_cast<TlsFailure*>(SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl))) : nullptr;
  if (failure != nullptr && failure->verify_result == X509_V_OK) {
    failure->verify_result = X509_STORE_CTX_get_error(store);
  }
  return 0;
}

config::ConfigFile option_file(const std::string& path, const char* option) {
  return {path, option};
}

}  // namespace

void configure_tls(amqp_socket_t* socket, const TlsSettings& tls, const std::string& host,
                   TlsFailure& failure) {
  auto* context = static_cast<SSL_CTX*>(amqp_ssl_socket_get_context(socket));
  // rabbitmq-c's own checks come after the handshake and know no --server-name: OpenSSL
  // verifies during it instead, with the name set below.
  amqp_ssl_socket_set_verify_peer(socket, 0);
  amqp_ssl_socket_set_verify_hostname(socket, 0);
  config::UpstreamTls settings;
  settings.verify = tls.verify;
  if (!tls.ca_file.empty()) settings.ca_file = option_file(tls.ca_file, "--ca-file");
  if (!tls.cert_file.empty()) settings.cert_file = option_file(tls.cert_file, "--cert-file");
  if (!tls.key_file.empty()) settings.key_file = option_file(tls.key_file, "--key-file");
  try {
    net::configure_upstream_context(context, settings);
  } catch (const config::ConfigError& e) {
    throw Failure(e.what());
  }
  if (!tls.verify) return;
  net::expect_broker_name(context, tls.server_name.empty() ? host : tls.server_name);
  SSL_CTX_set_app_data(context, &failure);
  SSL_CTX_set_verify(context, SSL_VERIFY_PEER, record_verify_result);
}

std::string describe_tls_failure(const TlsFailure& failure) {
  const unsigned long error = ERR_get_error();
  ERR_clear_error();
  return net::describe_handshake_failure(error, failure.verify_result, net::TlsPeer::replay_broker);
}

void diagnose_connect(const std::string& host, std::uint16_t port,
                      std::chrono::milliseconds timeout) {
  const std::string endpoint =
      (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
  asio::io_context io;
  tcp::resolver resolver(io);
  error_code ec;
  auto endpoints = resolver.resolve(host, std::to_string(port), ec);
  if (ec) throw Failure("cannot resolve the broker's host '" + host + "': " + ec.message());
  tcp::socket socket(io);
  std::optional<error_code> result;
  asio::async_connect(socket, endpoints,
                      [&result](const error_code& e, const tcp::endpoint&) { result = e; });
  io.run_for(timeout);
  if (!result) {
    throw Failure("cannot connect to " + endpoint + ": no answer within " +
                  std::to_string(timeout.count() / 1000) +
                  " s; is the broker up and the address right?");
  }
  if (*result) {
    throw Failure("cannot connect to " + endpoint + ": " + result->message() +
                  "; is the broker up and the address right?");
  }
}

}  // namespace nackguard::replay
