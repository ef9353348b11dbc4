#pragma once
// What the replay client's source files (amqp_client*.cpp, rabbitmq_properties.cpp) share:
// rabbitmq-c's byte strings and timeouts, and the one channel the client uses.

#include <amqp.h>
#include <sys/time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>

namespace nackguard::replay {
struct ClientSettings;
}

namespace nackguard::replay::detail {

inline constexpr amqp_channel_t kChannel = 1;  // the client uses channel 1 only

// rabbitmq-c's view of a string (it does not write through it).
inline amqp_bytes_t bytes_of(const std::string& text) {
  return {text.size(), const_cast<char*>(text.data())};
}

inline std::string text_of(amqp_bytes_t bytes) {
  return {static_cast<const char*>(bytes.bytes), bytes.len};
}

inline timeval to_timeval(std::chrono::steady_clock::duration d) {
  const auto us =
      std::max<std::int64_t>(0, std::chrono::duration_cast<std::chrono::microseconds>(d).count());
  return {static_cast<time_t>(us / 1'000'000), static_cast<suseconds_t>(us % 1'000'000)};
}

// Opens `connection`'s socket (TCP, or TLS as settings.tls says) and logs in
// (amqp_client_open.cpp). Throws a Failure that names the host and what to check.
void open_connection(amqp_connection_state_t connection, const ClientSettings& settings);

// "30 s", for messages.
inline std::string seconds(std::chrono::milliseconds d) {
  return std::to_string(d.count() / 1000) + " s";
}

}  // namespace nackguard::replay::detail
