#pragma once
// A queue pair in memory for the replay's tests (replayer_test, replayer_triage_test), and the
// dead-lettered messages they hold. Every call is logged, so tests can check the order of
// events.

#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <stdexcept>
#include <utility>

#include "proxy/replay/replayer.hpp"

namespace nackguard::replay::replay_test {

using amqp::FieldValue;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

inline Message dead_letter(std::string id, std::string reason = "max_redeliveries",
                           std::optional<std::int64_t> replays = std::nullopt) {
  Message m;
  m.header.properties.message_id = id;
  m.header.properties.headers.emplace();
  m.header.properties.headers->set("x-nackguard-reason", FieldValue::string(reason));
  m.header.properties.headers->set("x-nackguard-returns", FieldValue::i64(6));
  if (replays) m.header.properties.headers->set("x-nackguard-replays", FieldValue::i64(*replays));
  m.body.assign(id.begin(), id.end());
  return m;
}

inline std::string id_of(const amqp::ContentHeader& header) {
  return header.properties.message_id.value_or("?");
}

class FakeBroker : public Broker {
 public:
  explicit FakeBroker(std::vector<Message> messages) : ready(messages.begin(), messages.end()) {}

  std::optional<Message> get() override {
    if (fail_on_get) throw std::runtime_error("connection lost");
    if (ready.empty()) {
      log.push_back("empty");
      return std::nullopt;
    }
    Message m = std::move(ready.front());
    ready.pop_front();
    m.delivery_tag = ++last_tag;
    m.remaining = static_cast<std::uint32_t>(ready.size());
    unacked[m.delivery_tag] = m;
    log.push_back("get " + id_of(m.header));
    return m;
  }
  std::uint64_t publish_copy(const amqp::ContentHeader& header, amqp::ByteView body) override {
    log.push_back("publish " + id_of(header));
    unconfirmed.push_back(
        {++last_seq, Message{0, 0, header, amqp::Bytes(body.begin(), body.end())}});
    max_unconfirmed = std::max(max_unconfirmed, unconfirmed.size());
    return last_seq;
  }
  // Settles every unconfirmed copy, with the scripted outcomes, when asked to wait, or at
  // once when `eager`.
  std::vector<Confirm> confirms(bool wait) override {
    std::vector<Confirm> out;
    if (!wait && !eager) return out;
    for (auto& [seq, copy] : unconfirmed) {
      CopyOutcome outcome;
      if (!outcomes.empty()) {
        outcome = outcomes.front();
        outcomes.pop_front();
      }
      log.push_back("confirm " + std::to_string(seq));
      if (outcome.kind == CopyOutcome::Kind::confirmed) {
        published.push_back(copy);
        if (dead_letter_copies_again) ready.push_back(copy);
      }
      out.push_back({seq, outcome});
    }
    unconfirmed.clear();
    return out;
  }
  void ack(std::uint64_t tag) override {
    log.push_back("ack " + std::to_string(tag));
    EXPECT_EQ(unacked.erase(tag), 1u) << "ack of a tag that is not unacked: " << tag;
  }
  void requeue(std::span<const std::uint64_t> tags) override {
    std::string line = "requeue";
    std::deque<Message> back;
    for (std::uint64_t tag : tags) {
      line += " " + std::to_string(tag);
      auto it = unacked.find(tag);
      EXPECT_NE(it, unacked.end()) << "requeue of a tag that is not unacked: " << tag;
      if (it == unacked.end()) continue;
      back.push_back(it->second);
      unacked.erase(it);
    }
    ready.insert(ready.begin(), back.begin(), back.end());
    log.push_back(line);
  }
  void wait_until(Clock::time_point until, const std::function<bool()>&) override {
    waits.push_back(until - start);
    now = until;
  }

  std::deque<Message> ready;
  std::map<std::uint64_t, Message> unacked;
  std::vector<Message> published;
  std::deque<CopyOutcome> outcomes;  // scripted; confirmed once empty
  std::vector<std::pair<std::uint64_t, Message>> unconfirmed;
  std::size_t max_unconfirmed = 0;
  bool eager = true;
  std::uint64_t last_seq = 0;
  std::vector<std::string> log;
  std::vector<Clock::duration> waits;
  bool dead_letter_copies_again = false;
  bool fail_on_get = false;
  std::uint64_t last_tag = 0;
  const Clock::time_point start = Clock::time_point{} + 1h;
  Clock::time_point now = start;
};

inline Plan plan_for(const FakeBroker& broker) {
  Plan plan;
  plan.queued_at_start = broker.ready.size();
  return plan;
}

inline Summary run(FakeBroker& broker, const Plan& plan, std::function<bool()> interrupted = {}) {
  Replayer replayer(broker, plan, [&broker] { return broker.now; });
  return replayer.run(interrupted);
}

}  // namespace nackguard::replay::replay_test
