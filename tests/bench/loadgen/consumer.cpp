#include "loadgen/consumer.hpp"

namespace nackguard::bench {

namespace {
constexpr auto kPoll = std::chrono::milliseconds(200);
}

Consumer::Consumer(const Options& options, std::string queue, std::uint32_t index,
                   std::uint64_t expected, Progress& progress)
    : Connection(options, std::move(queue), index, progress), expected_(expected) {}

void Consumer::connect() {
  open_link();
  link_->qos(options_.prefetch);
}

void Consumer::flush_acks() {
  if (pending_ == 0) return;
  link_->ack(last_tag_, options_.ack_every > 1);
  acked_count_ += pending_;
  progress_.acked.fetch_add(pending_, std::memory_order_relaxed);
  pending_ = 0;
}

void Consumer::on_delivery(const amqp_envelope_t& envelope, std::int64_t received_ns) {
  ++deliveries_;
  progress_.delivered.fetch_add(1, std::memory_order_relaxed);
  const bool redelivered = envelope.redelivered != 0;
  if (redelivered) ++redelivered_;
  Stamp stamp;
  if (envelope.message.body.len >= kStampBytes) stamp = read_stamp(envelope.message.body.bytes);
  const std::uint64_t sequence = sequence_of(stamp.id);

  if (!redelivered) latencies_.push_back(received_ns - stamp.sent_ns);
  // The message's nacks so far, by sequence: a redelivered flag alone cannot tell (nackguard
  // shows its copies, new messages to the broker, as redelivered).
  if (sequence < nacks_.size() && nacks_[sequence] < options_.nack_times &&
      chosen_for_nack(stamp.id, options_.nack_fraction)) {
    ++nacks_[sequence];
    link_->nack(envelope.delivery_tag, true);
    ++nacked_;
    return;
  }
  if (sequence < acked_.size()) {
    if (acked_[sequence]) ++duplicates_;
    acked_[sequence] = 1;
  }
  ++pending_;
  last_tag_ = envelope.delivery_tag;
  if (pending_ >= options_.ack_every || acked_count_ + pending_ >= expected_) flush_acks();
}

std::uint64_t Consumer::missing() const {
  std::uint64_t seen = 0;
  for (std::uint8_t a : acked_) seen += a;
  return expected_ - seen;
}

void Consumer::run() {
  acked_.assign(expected_, 0);
  nacks_.assign(expected_, 0);
  latencies_.reserve(expected_);
  link_->consume(queue_);
  while (acked_count_ < expected_) {
    if (progress_.aborted()) return;
    link_->release_buffers();
    amqp_envelope_t envelope;
    if (!link_->next_delivery(envelope, kPoll)) continue;
    const std::int64_t received = now_ns();
    try {
      on_delivery(envelope, received);
    } catch (...) {
      amqp_destroy_envelope(&envelope);
      throw;
    }
    amqp_destroy_envelope(&envelope);
  }
  finished_ = Clock::now();
  link_->close();
}

}  // namespace nackguard::bench
