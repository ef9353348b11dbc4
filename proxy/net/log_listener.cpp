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
  std::uint64_t suppressed = 0;
  {
    std::lock_guard lock(mutex_);
    auto now = std::chrono::steady_clock::now();
    if (fallbacks_.size() > 10000) fallbacks_.clear();
    auto [it, inserted] = fallbacks_.try_emplace({std::string(queue), std::string(cause)});
    Repeats& repeats = it->second;
    if (!inserted && now - repeats.last < kFallbackLogInterval) {
      ++repeats.suppressed;
      return;
    }
    suppressed = repeats.suppressed;
    repeats = Repeats{now, 0};
  }
  spdlog::warn("fallback: queue={} cause={}: {}; the message went back to the broker as the "
               "consumer asked, nothing is lost ({} similar lines suppressed)",
               queue, cause, detail, suppressed);
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
