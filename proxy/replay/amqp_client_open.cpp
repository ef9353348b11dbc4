// Opening the replay client's connection: the socket (TCP, or TLS set up as upstream.tls), the
// AMQP handshake with SASL PLAIN or EXTERNAL, and channel 1; each failure as one line.

#include <amqp.h>
#include <amqp_ssl_socket.h>
#include <amqp_tcp_socket.h>

#include "proxy/replay/amqp_client.hpp"
#include "proxy/replay/client_internal.hpp"
#include "proxy/replay/client_tls.hpp"
#include "proxy/replay/errors.hpp"

namespace nackguard::replay {

namespace {

using namespace detail;  // client_internal.hpp

// SASL EXTERNAL's response, an authorization identity: RabbitMQ ignores it and takes the user
// from the certificate, but rabbitmq-c cannot send an empty one (it fails "could not allocate
// memory").
constexpr const char* kExternalIdentity = "nackguard-replay";

}  // namespace

void Client::open() {
  connection_ = amqp_new_connection();
  if (connection_ == nullptr) throw Failure("out of memory for the AMQP connection");
  connect_socket();
  login();
  open_ = true;
  amqp_channel_open_t channel_open{};
  send_method(kChannel, AMQP_CHANNEL_OPEN_METHOD, &channel_open);
  expect(AMQP_CHANNEL_OPEN_OK_METHOD, "channel.open-ok");
}

void Client::connect_socket() {
  const Upstream& upstream = settings_.upstream;
  amqp_socket_t* socket =
      settings_.tls.enabled ? amqp_ssl_socket_new(connection_) : amqp_tcp_socket_new(connection_);
  if (socket == nullptr) throw Failure("out of memory for the broker's socket");
  TlsFailure tls_failure;
  if (settings_.tls.enabled) configure_tls(socket, settings_.tls, upstream.host, tls_failure);
  timeval timeout = to_timeval(settings_.connect_timeout);
  const int status =
      amqp_socket_open_noblock(socket, upstream.host.c_str(), upstream.port, &timeout);
  if (status == AMQP_STATUS_OK) return;
  // rabbitmq-c says only "a socket error occurred": connect again to name the cause.
  if (status != AMQP_STATUS_SSL_CONNECTION_FAILED && status != AMQP_STATUS_SSL_ERROR) {
    diagnose_connect(upstream.host, upstream.port, settings_.connect_timeout);
    if (settings_.tls.enabled && status == AMQP_STATUS_TIMEOUT) {
      throw Failure(endpoint() + " accepted the connection but completed no TLS handshake within " +
                    seconds(settings_.connect_timeout) + "; is it a TLS port?");
    }
    throw Failure("cannot connect to " + endpoint() + ": " + amqp_error_string2(status));
  }
  throw Failure("the TLS handshake with " + endpoint() +
                " failed: " + describe_tls_failure(tls_failure));
}

void Client::login() {
  const Upstream& upstream = settings_.upstream;
  timeval handshake_timeout = to_timeval(settings_.reply_timeout);
  amqp_set_handshake_timeout(connection_, &handshake_timeout);

  // The name the management UI shows; capabilities are merged with rabbitmq-c's own.
  amqp_table_entry_t capabilities[] = {
      {amqp_cstring_bytes("connection.blocked"), {AMQP_FIELD_KIND_BOOLEAN, {.boolean = 1}}},
  };
  const char* strings[][2] = {{"product", "nackguard replay"},
                              {"connection_name", "nackguard replay"},
                              {"version", settings_.version.c_str()}};
  amqp_table_entry_t entries[4];
  for (std::size_t i = 0; i < 3; ++i) {
    entries[i].key = amqp_cstring_bytes(strings[i][0]);
    entries[i].value.kind = AMQP_FIELD_KIND_UTF8;
    entries[i].value.value.bytes = amqp_cstring_bytes(strings[i][1]);
  }
  entries[3].key = amqp_cstring_bytes("capabilities");
  entries[3].value.kind = AMQP_FIELD_KIND_TABLE;
  entries[3].value.value.table = {1, capabilities};
  amqp_table_t properties{4, entries};

  const amqp_rpc_reply_t reply =
      upstream.external
          ? amqp_login_with_properties(connection_, upstream.vhost.c_str(), 0, kWantedFrameMax,
                                       settings_.max_heartbeat, &properties,
                                       AMQP_SASL_METHOD_EXTERNAL, kExternalIdentity)
          : amqp_login_with_properties(connection_, upstream.vhost.c_str(), 0, kWantedFrameMax,
                                       settings_.max_heartbeat, &properties, AMQP_SASL_METHOD_PLAIN,
                                       upstream.user.c_str(), upstream.password.c_str());
  if (reply.reply_type != AMQP_RESPONSE_NORMAL) login_failed(&reply);
}

void Client::login_failed(const void* rpc_reply) {
  const auto& reply = *static_cast<const amqp_rpc_reply_t*>(rpc_reply);
  const Upstream& upstream = settings_.upstream;
  const std::string who =
      upstream.external ? "the client certificate (SASL EXTERNAL)" : "user '" + upstream.user + "'";
  if (reply.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION &&
      reply.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
    const auto* close = static_cast<const amqp_connection_close_t*>(reply.reply.decoded);
    const std::string text = describe_reply(close->reply_code, text_of(close->reply_text));
    if (close->reply_code == 403) {
      throw Failure(endpoint() + " refused the login of " + who + ": " +
                    (upstream.external ? "the certificate's CN must name a RabbitMQ user"
                                       : "check the user name and password") +
                    " (" + text + ")");
    }
    if (close->reply_code == 530) {
      throw Failure(endpoint() + " refused vhost '" + upstream.vhost + "' for " + who + " (" +
                    text + ")");
    }
    throw Failure(endpoint() + " closed the connection during the AMQP handshake (" + text + ")");
  }
  const int status = reply.library_error;
  if (status == AMQP_STATUS_BROKER_UNSUPPORTED_SASL_METHOD) {
    throw Failure(endpoint() + " does not offer SASL " +
                  (upstream.external ? "EXTERNAL: enable the rabbitmq_auth_mechanism_ssl plugin "
                                       "and list EXTERNAL in auth_mechanisms"
                                     : "PLAIN"));
  }
  if (status == AMQP_STATUS_TIMEOUT) {
    throw Failure(endpoint() + " did not complete the AMQP handshake within " +
                  seconds(settings_.reply_timeout));
  }
  throw Failure(endpoint() + " failed the AMQP handshake (" + amqp_error_string2(status) +
                "); is it a RabbitMQ AMQP 0-9-1 port" +
                (settings_.tls.enabled ? ", with TLS?" : "?"));
}

}  // namespace nackguard::replay
