#pragma once
// The two kinds of error `nackguard replay` reports to a person, each as one line.

#include <cstdint>
#include <stdexcept>
#include <string>

namespace nackguard::replay {

// The command line is wrong: exit code 2, with a pointer to --help.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Anything else that stops a run (a bad URL, an unreachable broker, a refused login, a
// missing queue): exit code 1.
struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The broker closed the channel or the connection (channel.close / connection.close).
struct BrokerClosed : Failure {
  BrokerClosed(std::string what, std::uint16_t reply_code, std::string reply_text,
               bool whole_connection)
      : Failure(std::move(what)),
        code(reply_code),
        text(std::move(reply_text)),
        connection(whole_connection) {}
  std::uint16_t code;
  std::string text;  // the broker's reply text, e.g. "NOT_FOUND - no queue 'q' in vhost '/'"
  bool connection;
};

}  // namespace nackguard::replay
