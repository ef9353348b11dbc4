#include "loadgen/publisher.hpp"

#include <thread>

namespace nackguard::bench {

namespace {
constexpr auto kPoll = std::chrono::milliseconds(200);
}

Publisher::Publisher(const Options& options, std::string queue, std::uint32_t index,
                     std::uint64_t messages, std::string run_id, Progress& progress)
    : Connection(options, std::move(queue), index, progress),
      messages_(messages),
      run_id_(std::move(run_id)) {}

void Publisher::connect() {
  open_link();
  link_->confirm_select();
}

void Publisher::confirm(std::uint64_t tag) {
  if (tag == 0 || tag > published_ || confirmed_[tag]) return;
  confirmed_[tag] = 1;
  ++confirmed_count_;
}

void Publisher::handle(const ChannelEvent& event) {
  if (event.kind != ChannelEvent::Kind::ack && event.kind != ChannelEvent::Kind::nack) return;
  const std::uint64_t before = confirmed_count_;
  if (event.multiple) {
    for (std::uint64_t tag = lowest_unconfirmed_; tag <= event.delivery_tag; ++tag) confirm(tag);
  } else {
    confirm(event.delivery_tag);
  }
  while (lowest_unconfirmed_ <= published_ && confirmed_[lowest_unconfirmed_]) {
    ++lowest_unconfirmed_;
  }
  if (event.kind == ChannelEvent::Kind::nack) broker_nacks_ += confirmed_count_ - before;
  progress_.confirmed.fetch_add(confirmed_count_ - before, std::memory_order_relaxed);
}

void Publisher::take_confirms(std::chrono::microseconds timeout) {
  handle(link_->wait_event(timeout));
  while (link_->has_buffered()) handle(link_->wait_event(std::chrono::microseconds(0)));
  link_->release_buffers();
}

void Publisher::run(Clock::time_point start) {
  confirmed_.assign(messages_ + 1, 0);
  std::vector<std::uint8_t> body(options_.size);
  for (std::size_t i = 0; i < body.size(); ++i) body[i] = static_cast<std::uint8_t>('a' + i % 26);

  amqp_basic_properties_t properties{};
  properties._flags = AMQP_BASIC_DELIVERY_MODE_FLAG;
  properties.delivery_mode = options_.persistent ? 2 : 1;
  std::string id_text;
  const double per_second = options_.rate / options_.connections;
  // Publisher i's k-th message is due at (k + i/c) / per_second: the publishers take turns,
  // so the messages are evenly spaced in all (and, with --targets, alternate between targets).
  const double stagger = static_cast<double>(index_) / options_.connections;

  for (std::uint64_t k = 0; k < messages_; ++k) {
    if (progress_.aborted()) return;
    if (per_second > 0) {
      const auto due = start + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>((k + stagger) / per_second));
      for (auto now = Clock::now(); now < due && !progress_.aborted(); now = Clock::now()) {
        auto wait = std::chrono::duration_cast<std::chrono::microseconds>(due - now);
        if (published_ > confirmed_count_) {
          // Waits on the socket itself: rabbitmq-c's own wait spins below 1 ms.
          if (link_->has_buffered() || link_->wait_readable(wait)) {
            take_confirms(std::chrono::microseconds(0));
          }
        } else {
          std::this_thread::sleep_for(wait);
        }
      }
    }
    while (published_ - confirmed_count_ >= options_.confirm_window) {
      if (progress_.aborted()) return;
      take_confirms(kPoll);
    }
    if (link_->has_buffered()) take_confirms(std::chrono::microseconds(0));

    if (options_.message_id) {
      id_text = run_id_;
      id_text += '.';
      id_text += std::to_string(index_);
      id_text += '.';
      id_text += std::to_string(k);
      properties._flags |= AMQP_BASIC_MESSAGE_ID_FLAG;
      properties.message_id = amqp_cstring_bytes(id_text.c_str());
    }
    write_stamp(body.data(), Stamp{now_ns(), message_id(index_, k)});
    link_->publish(queue_, properties, amqp_bytes_t{body.size(), body.data()});
    ++published_;
    progress_.published.fetch_add(1, std::memory_order_relaxed);
  }
  while (confirmed_count_ < messages_) {
    if (progress_.aborted()) return;
    take_confirms(kPoll);
  }
  finished_ = Clock::now();
  link_->close();
}

}  // namespace nackguard::bench
