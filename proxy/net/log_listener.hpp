#pragma once
// Turns the guard's events into log lines: one per dead-letter, one per outage start and end,
// one per fallback. Never a body, never a credential.

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

#include "proxy/retry/guard_context.hpp"

namespace nackguard::net {

// Queue names and message ids come from clients: control characters are written as \xNN so
// that one cannot split or forge a log line.
std::string printable(std::string_view text);

class LogListener : public retry::GuardListener {
 public:
  void on_dead_letter(std::string_view queue, std::string_view identity, std::uint32_t returns,
                      retry::DeadLetterReason reason) override;
  void on_fallback(std::string_view queue, retry::Fallback fallback,
                   std::string_view detail) override;
  void on_outage(std::string_view queue, bool started, double ratio) override;
  void on_notice(std::string_view queue, std::string_view what) override;
  void on_ack_timeout(std::string_view queue, std::string_view identity,
                      std::int64_t held_ms) override;

 private:
  // Fallbacks can repeat at the consumer's pace while a DLQ is refused: one line per queue and
  // cause every kFallbackLogInterval, with the number of repeats in between.
  static constexpr std::chrono::seconds kFallbackLogInterval{10};
  struct Repeats {
    std::chrono::steady_clock::time_point last;
    std::uint64_t suppressed = 0;
  };
  std::mutex mutex_;
  // By queue and reported cause (at the broker's limit, one whatever the cause under it).
  std::map<std::tuple<std::string, bool, retry::FallbackCause>, Repeats> fallbacks_;
};

}  // namespace nackguard::net
