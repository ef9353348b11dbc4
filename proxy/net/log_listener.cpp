#include "proxy/net/log_listener.hpp"

#include <spdlog/spdlog.h>

namespace nackguard::net {

void LogListener::on_dead_letter(std::string_view queue, std::string_view identity,
                                 std::uint32_t returns, retry::DeadLetterReason reason) {
  spdlog::warn("dead-lettered: queue={} identity={} returns={} reason={}", queue, identity, returns,
               retry::to_string(reason));
}

void LogListener::on_fallback(std::string_view queue, std::string_view cause,
                              std::string_view detail) {
  spdlog::warn("fallback: queue={} cause={}: {}; the consumer's requeue went to the broker unchanged",
               queue, cause, detail);
}

void LogListener::on_outage(std::string_view queue, bool started, double ratio) {
  if (started) {
    spdlog::warn("outage started: queue={} return ratio {:.2f}; returns are delayed and not counted "
                 "towards dead-lettering until it ends",
                 queue, ratio);
  } else {
    spdlog::info("outage ended: queue={} return ratio {:.2f}", queue, ratio);
  }
}

}  // namespace nackguard::net
