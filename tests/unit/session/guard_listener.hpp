#pragma once
// What a Guard reported to its GuardListener, recorded for the guard tests (guard_script.hpp).

#include <gtest/gtest.h>

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "proxy/retry/decision.hpp"
#include "proxy/retry/guard_context.hpp"
#include "session/guard_messages.hpp"

namespace nackguard::session::guard_test {

class RecordingListener : public retry::GuardListener {
 public:
  struct DeadLettered {
    std::string queue;
    std::string identity;
    std::uint32_t returns = 0;
    retry::DeadLetterReason reason = retry::DeadLetterReason::none;
    bool operator==(const DeadLettered&) const = default;
  };
  struct Fallback {
    std::string queue;
    retry::FallbackCause cause;
    bool at_broker_limit;
    std::string detail;
  };
  struct Outage {
    std::string queue;
    bool started = false;
    double ratio = 0.0;
  };

  int deliveries = 0;
  int returns = 0;
  int ack_timeouts = 0;
  std::vector<retry::Action> requeues;
  std::vector<DeadLettered> dead_letters;
  std::vector<Fallback> fallbacks;
  std::vector<Outage> outages;

  void on_delivery(std::string_view) override { ++deliveries; }
  void on_return(std::string_view) override { ++returns; }
  void on_ack_timeout(std::string_view, std::string_view, std::int64_t) override { ++ack_timeouts; }
  void on_requeue(std::string_view queue, retry::Action action) override {
    EXPECT_EQ(queue, kQueue);
    requeues.push_back(action);
  }
  void on_dead_letter(std::string_view queue, std::string_view identity, std::uint32_t count,
                      retry::DeadLetterReason reason) override {
    dead_letters.push_back({std::string(queue), std::string(identity), count, reason});
  }
  void on_fallback(std::string_view queue, retry::Fallback fallback,
                   std::string_view detail) override {
    fallbacks.push_back(
        {std::string(queue), fallback.cause, fallback.at_broker_limit, std::string(detail)});
  }
  void on_outage(std::string_view queue, bool started, double ratio) override {
    outages.push_back({std::string(queue), started, ratio});
  }
};

// A dead-letter the listener heard of, as the tests write the ones they expect.
using Dl = RecordingListener::DeadLettered;

inline void PrintTo(const RecordingListener::DeadLettered& d, std::ostream* os) {
  *os << "{" << d.queue << ", " << d.identity << ", " << d.returns << ", "
      << retry::to_string(d.reason) << "}";
}

}  // namespace nackguard::session::guard_test
