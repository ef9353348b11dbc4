#pragma once
// What a publishing and a consuming connection share: the run's options, the queue, the index
// that picks the target, the run's progress counters, the link once connected, and when the
// connection finished its part.

#include <cstdint>
#include <memory>
#include <string>

#include "loadgen/amqp_link.hpp"
#include "loadgen/options.hpp"
#include "loadgen/run_state.hpp"

namespace nackguard::bench {

class Connection {
 public:
  Clock::time_point finished() const { return finished_; }

 protected:
  Connection(const Options& options, std::string queue, std::uint32_t index, Progress& progress)
      : options_(options), queue_(std::move(queue)), index_(index), progress_(progress) {}

  // Connects to this connection's target (connection_port).
  void open_link() {
    link_ = std::make_unique<AmqpLink>(options_, connection_port(options_, index_));
  }

  const Options& options_;
  std::string queue_;
  std::uint32_t index_;
  Progress& progress_;
  std::unique_ptr<AmqpLink> link_;
  Clock::time_point finished_{};
};

}  // namespace nackguard::bench
