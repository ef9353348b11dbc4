#pragma once
// Turns the guard's events into log lines: one per dead-letter, one per outage start and end,
// one per fallback. Never a body, never a credential.

#include "proxy/session/guard_context.hpp"

namespace nackguard::net {

class LogListener : public session::GuardListener {
 public:
  void on_dead_letter(std::string_view queue, std::string_view identity, std::uint32_t returns,
                      retry::DeadLetterReason reason) override;
  void on_fallback(std::string_view queue, std::string_view cause,
                   std::string_view detail) override;
  void on_outage(std::string_view queue, bool started, double ratio) override;
};

}  // namespace nackguard::net
