#include "loadgen/amqp_link.hpp"

#include <amqp_ssl_socket.h>
#include <amqp_tcp_socket.h>
#include <poll.h>
#include <sys/time.h>

namespace nackguard::bench {

namespace {

timeval to_timeval(std::chrono::microseconds timeout) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1'000'000);
  tv.tv_usec = static_cast<suseconds_t>(timeout.count() % 1'000'000);
  return tv;
}

std::string bytes_text(amqp_bytes_t bytes) {
  return std::string(static_cast<const char*>(bytes.bytes), bytes.len);
}

std::string describe_reply(const amqp_rpc_reply_t& reply) {
  switch (reply.reply_type) {
    case AMQP_RESPONSE_NORMAL:
      return "ok";
    case AMQP_RESPONSE_NONE:
      return "no reply (missing RPC reply type)";
    case AMQP_RESPONSE_LIBRARY_EXCEPTION:
      return describe_status(reply.library_error);
    case AMQP_RESPONSE_SERVER_EXCEPTION:
      if (reply.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
        auto* m = static_cast<amqp_connection_close_t*>(reply.reply.decoded);
        return "connection.close " + std::to_string(m->reply_code) + " " +
               bytes_text(m->reply_text);
      }
      if (reply.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
        auto* m = static_cast<amqp_channel_close_t*>(reply.reply.decoded);
        return "channel.close " + std::to_string(m->reply_code) + " " + bytes_text(m->reply_text);
      }
      return "server exception, method " + std::to_string(reply.reply.id);
  }
  return "unknown reply";
}

// A TLS socket that verifies the peer's chain against `ca_file`. Empty `why`: made.
amqp_socket_t* tls_socket(amqp_connection_state_t conn, const std::string& ca_file,
                          std::string& why) {
  amqp_socket_t* socket = amqp_ssl_socket_new(conn);
  if (socket == nullptr) {
    why = "cannot create a TLS socket";
    return nullptr;
  }
  int status = amqp_ssl_socket_set_cacert(socket, ca_file.c_str());
  if (status != AMQP_STATUS_OK) {
    why = "--tls-ca " + ca_file + ": " + describe_status(status);
    return nullptr;
  }
  amqp_ssl_socket_set_verify_peer(socket, 1);
  amqp_ssl_socket_set_verify_hostname(socket, 0);
  return socket;
}

}  // namespace

std::string describe_status(int status) {
  return amqp_error_string2(status);
}

AmqpLink::AmqpLink(const Options& options, std::uint16_t port)
    : conn_(amqp_new_connection()),
      where_(options.host + ":" + std::to_string(port)),
      quorum_(options.quorum) {
  if (conn_ == nullptr) throw LinkError("out of memory creating a connection");
  std::string why = "cannot create a TCP socket";
  amqp_socket_t* socket = options.tls_ca_file.empty() ? amqp_tcp_socket_new(conn_)
                                                      : tls_socket(conn_, options.tls_ca_file, why);
  if (socket == nullptr) {
    amqp_destroy_connection(conn_);  // the socket, if any, is the connection's
    conn_ = nullptr;
    throw LinkError(why);
  }
  timeval connect_timeout = to_timeval(std::chrono::seconds(10));
  int status = amqp_socket_open_noblock(socket, options.host.c_str(), port, &connect_timeout);
  if (status != AMQP_STATUS_OK) {
    amqp_destroy_connection(conn_);
    conn_ = nullptr;
    throw LinkError("connect to " + where_ + ": " + describe_status(status));
  }
  amqp_rpc_reply_t login =
      amqp_login(conn_, options.vhost.c_str(), 0, static_cast<int>(options.frame_max), 0,
                 AMQP_SASL_METHOD_PLAIN, options.user.c_str(), options.password.c_str());
  if (login.reply_type != AMQP_RESPONSE_NORMAL) {
    std::string why = describe_reply(login);
    amqp_destroy_connection(conn_);
    conn_ = nullptr;
    throw LinkError("login to " + where_ + ": " + why);
  }
  open_ = true;
  // Without it an RPC (a declare, or the close at the end) to a peer that stopped answering
  // would wait for ever.
  timeval rpc_timeout = to_timeval(std::chrono::seconds(10));
  amqp_set_rpc_timeout(conn_, &rpc_timeout);
  amqp_channel_open(conn_, kChannel);
  check_rpc("channel.open");
}

AmqpLink::~AmqpLink() {
  try {
    close();
  } catch (const LinkError&) {
    // The peer is gone already; nothing left to release but the state below.
  }
  if (conn_ != nullptr) amqp_destroy_connection(conn_);
}

void AmqpLink::check_rpc(std::string_view what) {
  amqp_rpc_reply_t reply = amqp_get_rpc_reply(conn_);
  if (reply.reply_type != AMQP_RESPONSE_NORMAL) {
    throw LinkError(std::string(what) + " on " + where_ + ": " + describe_reply(reply));
  }
}

void AmqpLink::declare_queue(const std::string& queue) {
  amqp_table_entry_t type;
  type.key = amqp_cstring_bytes("x-queue-type");
  type.value.kind = AMQP_FIELD_KIND_UTF8;
  type.value.value.bytes = amqp_cstring_bytes("quorum");
  amqp_table_t quorum{1, &type};
  // A quorum queue is durable, and never exclusive or auto-delete.
  amqp_queue_declare(conn_, kChannel, amqp_cstring_bytes(queue.c_str()), 0, quorum_ ? 1 : 0, 0, 0,
                     quorum_ ? quorum : amqp_empty_table);
  check_rpc("queue.declare " + queue);
}

void AmqpLink::delete_queue(const std::string& queue) {
  amqp_queue_delete(conn_, kChannel, amqp_cstring_bytes(queue.c_str()), 0, 0);
  check_rpc("queue.delete " + queue);
}

void AmqpLink::qos(std::uint16_t prefetch) {
  amqp_basic_qos(conn_, kChannel, 0, prefetch, 0);
  check_rpc("basic.qos");
}

void AmqpLink::confirm_select() {
  amqp_confirm_select(conn_, kChannel);
  check_rpc("confirm.select");
}

void AmqpLink::consume(const std::string& queue) {
  amqp_basic_consume(conn_, kChannel, amqp_cstring_bytes(queue.c_str()), amqp_empty_bytes, 0, 0, 0,
                     amqp_empty_table);
  check_rpc("basic.consume " + queue);
}

void AmqpLink::publish(const std::string& queue, const amqp_basic_properties_t& properties,
                       amqp_bytes_t body) {
  int status = amqp_basic_publish(conn_, kChannel, amqp_empty_bytes,
                                  amqp_cstring_bytes(queue.c_str()), 0, 0, &properties, body);
  if (status != AMQP_STATUS_OK) {
    open_ = false;
    throw LinkError("basic.publish on " + where_ + ": " + describe_status(status));
  }
}

void AmqpLink::ack(std::uint64_t tag, bool multiple) {
  int status = amqp_basic_ack(conn_, kChannel, tag, multiple ? 1 : 0);
  if (status != AMQP_STATUS_OK) {
    open_ = false;
    throw LinkError("basic.ack on " + where_ + ": " + describe_status(status));
  }
}

void AmqpLink::nack(std::uint64_t tag, bool requeue) {
  int status = amqp_basic_nack(conn_, kChannel, tag, 0, requeue ? 1 : 0);
  if (status != AMQP_STATUS_OK) {
    open_ = false;
    throw LinkError("basic.nack on " + where_ + ": " + describe_status(status));
  }
}

bool AmqpLink::has_buffered() const {
  return amqp_frames_enqueued(conn_) || amqp_data_in_buffer(conn_);
}

bool AmqpLink::wait_readable(std::chrono::microseconds timeout) const {
  pollfd fd{amqp_get_sockfd(conn_), POLLIN, 0};
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(timeout);
  const timespec ts{static_cast<time_t>(seconds.count()),
                    static_cast<long>((timeout - seconds).count() * 1000)};
  return ppoll(&fd, 1, &ts, nullptr) > 0;
}

ChannelEvent AmqpLink::to_event(const amqp_frame_t& frame) {
  ChannelEvent event;
  if (frame.frame_type != AMQP_FRAME_METHOD) {
    event.kind = ChannelEvent::Kind::other;
    return event;
  }
  switch (frame.payload.method.id) {
    case AMQP_BASIC_ACK_METHOD: {
      auto* m = static_cast<amqp_basic_ack_t*>(frame.payload.method.decoded);
      event = {ChannelEvent::Kind::ack, m->delivery_tag, m->multiple != 0};
      return event;
    }
    case AMQP_BASIC_NACK_METHOD: {
      auto* m = static_cast<amqp_basic_nack_t*>(frame.payload.method.decoded);
      event = {ChannelEvent::Kind::nack, m->delivery_tag, m->multiple != 0};
      return event;
    }
    case AMQP_CHANNEL_CLOSE_METHOD: {
      auto* m = static_cast<amqp_channel_close_t*>(frame.payload.method.decoded);
      open_ = false;
      throw LinkError("the peer closed the channel on " + where_ + ": " +
                      std::to_string(m->reply_code) + " " + bytes_text(m->reply_text));
    }
    case AMQP_CONNECTION_CLOSE_METHOD: {
      auto* m = static_cast<amqp_connection_close_t*>(frame.payload.method.decoded);
      open_ = false;
      throw LinkError("the peer closed the connection on " + where_ + ": " +
                      std::to_string(m->reply_code) + " " + bytes_text(m->reply_text));
    }
    case AMQP_BASIC_CANCEL_METHOD:
      throw LinkError("the broker cancelled the consumer on " + where_);
    default:
      event.kind = ChannelEvent::Kind::other;
      return event;
  }
}

ChannelEvent AmqpLink::wait_event(std::chrono::microseconds timeout) {
  amqp_frame_t frame;
  timeval tv = to_timeval(timeout);
  int status = amqp_simple_wait_frame_noblock(conn_, &frame, &tv);
  if (status == AMQP_STATUS_TIMEOUT) return {};
  if (status != AMQP_STATUS_OK) {
    open_ = false;
    throw LinkError("reading from " + where_ + ": " + describe_status(status));
  }
  return to_event(frame);
}

bool AmqpLink::next_delivery(amqp_envelope_t& envelope, std::chrono::microseconds timeout) {
  timeval tv = to_timeval(timeout);
  amqp_rpc_reply_t reply = amqp_consume_message(conn_, &envelope, &tv, 0);
  if (reply.reply_type == AMQP_RESPONSE_NORMAL) return true;
  if (reply.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION) {
    if (reply.library_error == AMQP_STATUS_TIMEOUT) return false;
    if (reply.library_error == AMQP_STATUS_UNEXPECTED_STATE) {
      // Something other than a delivery came first: read it, throw if it closes us.
      amqp_frame_t frame;
      int status = amqp_simple_wait_frame(conn_, &frame);
      if (status != AMQP_STATUS_OK) {
        open_ = false;
        throw LinkError("reading from " + where_ + ": " + describe_status(status));
      }
      to_event(frame);
      return false;
    }
  }
  open_ = false;
  throw LinkError("consuming from " + where_ + ": " + describe_reply(reply));
}

void AmqpLink::release_buffers() {
  amqp_maybe_release_buffers(conn_);
}

void AmqpLink::close() {
  if (!open_ || conn_ == nullptr) return;
  open_ = false;
  amqp_rpc_reply_t reply = amqp_channel_close(conn_, kChannel, AMQP_REPLY_SUCCESS);
  if (reply.reply_type == AMQP_RESPONSE_NORMAL) {
    reply = amqp_connection_close(conn_, AMQP_REPLY_SUCCESS);
  }
  if (reply.reply_type != AMQP_RESPONSE_NORMAL) {
    throw LinkError("closing " + where_ + ": " + describe_reply(reply));
  }
}

}  // namespace nackguard::bench
