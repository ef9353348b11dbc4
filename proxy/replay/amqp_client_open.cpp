// Opening the replay client's connection: the socket (TCP, or TLS set up as upstream.tls) and
// the AMQP handshake with SASL PLAIN or EXTERNAL; each failure as one line. Client::open then
// opens channel 1.

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

void connect_socket(amqp_connection_state_t connection, const ClientSettings& settings) {
  const std::string endpoint = settings.upstream.endpoint();
  const Upstream& upstream = settings.upstream;
  amqp_socket_t* socket =
      settings.tls.enabled ? amqp_ssl_socket_new(connection) : amqp_tcp_socket_new(connection);
  if (socket == nullptr) throw Failure("out of memory for the broker's socket");
  TlsFailure tls_failure;
  if (settings.tls.enabled) configure_tls(socket, settings.tls, upstream.host, tls_failure);
  timeval timeout = to_timeval(settings.connect_timeout);
  const int status =
      amqp_socket_open_noblock(socket, upstream.host.c_str(), upstream.port, &timeout);
  if (status == AMQP_STATUS_OK) return;
  // rabbitmq-c says only "a socket error occurred": connect again to name the cause.
  if (status != AMQP_STATUS_SSL_CONNECTION_FAILED && status != AMQP_STATUS_SSL_ERROR) {
    diagnose_connect(upstream.host, upstream.port, settings.connect_timeout);
    if (settings.tls.enabled && status == AMQP_STATUS_TIMEOUT) {
      throw Failure(endpoint + " accepted the connection but completed no TLS handshake within " +
                    seconds(settings.connect_timeout) + "; is it a TLS port?");
    }
    throw Failure("cannot connect to " + endpoint + ": " + amqp_error_string2(status));
  }
  throw Failure("the TLS handshake with " + endpoint +
                " failed: " + describe_tls_failure(tls_failure));
}

// Throws what a failed login means for the user.
[[noreturn]] void login_failed(const amqp_rpc_reply_t& reply, const ClientSettings& settings) {
  const std::string endpoint = settings.upstream.endpoint();
  const Upstream& upstream = settings.upstream;
  const std::string who =
      upstream.external ? "the client certificate (SASL EXTERNAL)" : "user '" + upstream.user + "'";
  if (reply.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION &&
      reply.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
    const auto* close = static_cast<const amqp_connection_close_t*>(reply.reply.decoded);
    const std::string text = describe_reply(close->reply_code, text_of(close->reply_text));
    if (close->reply_code == 403) {
      throw Failure(endpoint + " refused the login of " + who + ": " +
                    (upstream.external ? "the certificate's CN must name a RabbitMQ user"
                                       : "check the user name and password") +
                    " (" + text + ")");
    }
    if (close->reply_code == 530) {
      throw Failure(endpoint + " refused vhost '" + upstream.vhost + "' for " + who + " (" + text +
                    ")");
    }
    throw Failure(endpoint + " closed the connection during the AMQP handshake (" + text + ")");
  }
  const int status = reply.library_error;
  if (status == AMQP_STATUS_BROKER_UNSUPPORTED_SASL_METHOD) {
    throw Failure(endpoint + " does not offer SASL " +
                  (upstream.external ? "EXTERNAL: enable the rabbitmq_auth_mechanism_ssl plugin "
                                       "and list EXTERNAL in auth_mechanisms"
                                     : "PLAIN"));
  }
  if (status == AMQP_STATUS_TIMEOUT) {
    throw Failure(endpoint + " did not complete the AMQP handshake within " +
                  seconds(settings.reply_timeout));
  }
  throw Failure(endpoint + " failed the AMQP handshake (" + amqp_error_string2(status) +
                "); is it a RabbitMQ AMQP 0-9-1 port" +
                (settings.tls.enabled ? ", with TLS?" : "?"));
}

void login(amqp_connection_state_t connection, const ClientSettings& settings) {
  const Upstream& upstream = settings.upstream;
  timeval handshake_timeout = to_timeval(settings.reply_timeout);
  amqp_set_handshake_timeout(connection, &handshake_timeout);

  // The name the management UI shows; capabilities are merged with rabbitmq-c's own.
  amqp_table_entry_t capabilities[] = {
      {amqp_cstring_bytes("connection.blocked"), {AMQP_FIELD_KIND_BOOLEAN, {.boolean = 1}}},
  };
  const char* strings[][2] = {{"product", "nackguard replay"},
                              {"connectionname", "nackguard replay"},
                              {"version", settings.version.c_str()}};
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
          ? amqp_login_with_properties(connection, upstream.vhost.c_str(), 0, kWantedFrameMax,
                                       settings.max_heartbeat, &properties,
                                       AMQP_SASL_METHOD_EXTERNAL, kExternalIdentity)
          : amqp_login_with_properties(connection, upstream.vhost.c_str(), 0, kWantedFrameMax,
                                       settings.max_heartbeat, &properties, AMQP_SASL_METHOD_PLAIN,
                                       upstream.user.c_str(), upstream.password.c_str());
  if (reply.reply_type != AMQP_RESPONSE_NORMAL) login_failed(reply, settings);
}

}  // namespace

void detail::open_connection(amqp_connection_state_t connection, const ClientSettings& settings) {
  connect_socket(connection, settings);
  login(connection, settings);
}

}  // namespace nackguard::replay
