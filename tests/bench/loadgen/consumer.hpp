#pragma once
// One consuming connection: consumes its queue until every message published to it has been
// acked once, nacking the chosen fraction of first deliveries once with requeue=true.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loadgen/connection.hpp"

namespace nackguard::bench {

class Consumer : public Connection {
 public:
  Consumer(const Options& options, std::string queue, std::uint32_t index, std::uint64_t expected,
           Progress& progress);

  void connect();
  void run();

  // End-to-end latency of each first delivery, in nanoseconds.
  const std::vector<std::int64_t>& latencies() const { return latencies_; }
  std::uint64_t deliveries() const { return deliveries_; }
  std::uint64_t nacked() const { return nacked_; }
  std::uint64_t duplicates() const { return duplicates_; }
  std::uint64_t redelivered() const { return redelivered_; }
  // Messages of this queue never acked (a run that stopped early, or duplicates).
  std::uint64_t missing() const;

 private:
  void on_delivery(const amqp_envelope_t& envelope, std::int64_t received_ns);
  void flush_acks();

  std::uint64_t expected_;

  std::vector<std::uint8_t> acked_;  // by sequence number in the queue
  std::vector<std::uint8_t> nacks_;  // nacks sent, by sequence number
  std::vector<std::int64_t> latencies_;
  std::uint64_t acked_count_ = 0;  // acks sent, counting each message a multiple ack covers
  std::uint64_t pending_ = 0;      // deliveries waiting for the next multiple ack
  std::uint64_t last_tag_ = 0;
  std::uint64_t deliveries_ = 0;
  std::uint64_t nacked_ = 0;
  std::uint64_t duplicates_ = 0;
  std::uint64_t redelivered_ = 0;
};

}  // namespace nackguard::bench
