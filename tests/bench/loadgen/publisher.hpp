#pragma once
// One publishing connection: publishes its share of the messages to its queue through the
// default exchange, with publisher confirms and at most `confirm_window` unconfirmed.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loadgen/connection.hpp"

namespace nackguard::bench {

class Publisher : public Connection {
 public:
  Publisher(const Options& options, std::string queue, std::uint32_t index, std::uint64_t messages,
            std::string run_id, Progress& progress);

  void connect();
  // Publishes every message, then waits for the last confirm. `start` paces a --rate run.
  void run(Clock::time_point start);

  std::uint64_t broker_nacks() const { return broker_nacks_; }

 private:
  void handle(const ChannelEvent& event);
  void confirm(std::uint64_t tag);
  // Waits for a confirm (or up to `timeout`), then takes every one already read.
  void take_confirms(std::chrono::microseconds timeout);

  std::uint64_t messages_;
  std::string run_id_;

  std::vector<std::uint8_t> confirmed_;  // by publish sequence number (the delivery tag)
  std::uint64_t lowest_unconfirmed_ = 1;
  std::uint64_t published_ = 0;
  std::uint64_t confirmed_count_ = 0;
  std::uint64_t broker_nacks_ = 0;
};

}  // namespace nackguard::bench
