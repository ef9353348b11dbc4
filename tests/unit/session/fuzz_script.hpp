#pragma once
// The script of the session fuzz target (tests/fuzz/fuzz_session.cpp), also replayed over its
// seeds by session_corpus_replay_test.cpp: the sans-io Session with a real Guard observing it,
// driven by a script the input spells. After a fixed handshake (channels 1 and 2 consume queues
// "q1" and "q2", each under its own policy), each step takes a few input bytes and does one of: raw
// bytes from the client or the broker (in reads split as a relay's), a delivery, the client's
// ack, nack, reject or recover, the broker's answers on the proxy's own channel (open-ok,
// declare-ok, confirms, returns, closes), a channel close from either side, a client's publish
// cut off mid-content, a tick of the clocks, an end of either side. Bytes go in as the relay
// hands them over (input_space, receive_input with a send-ahead, handle_input) and come out as
// it takes them (forwarded, then output).
// Properties: no crash, leak or undefined behaviour (ASan, UBSan); what the session writes to
// each side is a sequence of whole frames (after the protocol header towards the broker),
// never a partial one; memory stays within libFuzzer's limit whatever sizes the frames claim.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "proxy/guard/guard.hpp"
#include "proxy/retry/guard_context.hpp"
#include "proxy/retry/policy_set.hpp"
#include "proxy/session/session.hpp"
#include "session/frame_builders.hpp"

namespace nackguard::session::fuzz {

using session::Side;
using session::test::Bytes;
using session::test::ByteView;
using session::test::method;

constexpr std::uint16_t kChannelMax = 16;  // the proxy's own channel is 16
constexpr std::uint16_t kProxyChannel = kChannelMax;
constexpr std::size_t kMaxSteps = 256;

// The input, read a byte or a run at a time; past its end every read is 0 or empty.
class Script {
 public:
  Script(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  bool done() const { return at_ >= size_; }
  std::uint8_t u8() { return at_ < size_ ? data_[at_++] : 0; }
  bool bit() { return (u8() & 1) != 0; }
  ByteView run(std::size_t n) {
    n = std::min(n, size_ - std::min(at_, size_));
    ByteView out(data_ + at_, n);
    at_ += n;
    return out;
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t at_ = 0;
};

// What one side receives, checked as whole frames as it arrives: `broken` says what was not.
class Stream {
 public:
  explicit Stream(bool starts_with_header) : header_left_(starts_with_header ? 8 : 0) {}
  std::string broken;
  void take(ByteView bytes) {
    while (header_left_ > 0 && !bytes.empty()) {
      bytes = bytes.subspan(1);
      --header_left_;
    }
    pending_.insert(pending_.end(), bytes.begin(), bytes.end());
    ByteView rest(pending_);
    while (!rest.empty()) {
      nackguard::amqp::FrameResult r = decoder_.decode(rest);
      if (r.status != nackguard::amqp::FrameResult::Status::frame) {
        broken = "the session wrote something that is not whole frames";
        break;
      }
      rest = rest.subspan(r.frame.raw.size());
    }
    pending_.clear();
  }

 private:
  std::size_t header_left_;
  nackguard::amqp::FrameDecoder decoder_{1u << 24};
  Bytes pending_;
};

nackguard::retry::Policy policy(const std::string& queue, bool delayed) {
  nackguard::retry::Policy p;
  p.queue = queue;
  p.max_redeliveries = delayed ? 3 : 1;
  p.identity = {{nackguard::retry::IdentitySource::Kind::message_id, ""}};
  p.requeue =
      delayed ? nackguard::retry::RequeueMode::delayed : nackguard::retry::RequeueMode::immediate;
  p.dead_letter.via = delayed ? nackguard::retry::DeadLetter::Via::reject
                              : nackguard::retry::DeadLetter::Via::publish;
  p.backoff.initial = nackguard::retry::Millis(100);
  p.rate.per_message = delayed ? 1 : 1000;
  return p;
}

class Connection {
 public:
  Connection()
      : context_(
            settings(),
            std::make_shared<const nackguard::retry::PolicySet>(
                std::vector<nackguard::retry::Policy>{policy("q1", false), policy("q2", true)}),
            nullptr,
            nackguard::retry::GuardClocks{[this] { return now_; }, [this] { return now_; }}),
        guard_(context_, 1),
        session_(guard::guarded(options(), context_), &guard_) {}

  void handshake() {
    session::test::HandshakeParams p;
    p.broker_channel_max = kChannelMax;
    p.client_channel_max = kChannelMax - 1;
    p.client_frame_max = 131072;
    p.client_heartbeat = 60;
    const session::test::HandshakeFrames f = session::test::handshake_frames(p, {});
    in(Side::client, session::test::protocol_header(), false);
    in(Side::broker, f.start, false);
    in(Side::client, f.start_ok, false);
    in(Side::broker, f.tune, false);
    in(Side::client, f.tune_ok, false);
    in(Side::client, f.open, false);
    in(Side::broker, f.open_ok, false);
    if (!session_.is_open()) to_client_.broken = "the scripted handshake did not open it";
    for (std::uint16_t ch : {1, 2}) {
      const std::string n = std::to_string(ch);
      in(Side::client, method(ch, nackguard::amqp::ChannelOpen{}), false);
      in(Side::broker, method(ch, nackguard::amqp::ChannelOpenOk{}), false);
      in(Side::client, method(ch, session::test::consume_method("q" + n, "c" + n)), false);
      in(Side::broker, method(ch, nackguard::amqp::BasicConsumeOk{"c" + n}), false);
    }
  }

  // One step: a byte of flags (the channel, a send-ahead, the side), the step's kind, then
  // what that kind reads. Every read is a statement of its own, so that a seed means the
  // same whatever order a compiler evaluates arguments in.
  void step(Script& s) {
    const std::uint8_t flags = s.u8();
    const std::uint16_t ch = (flags & 1) ? 1 : 2;
    const bool ahead = (flags & 2) != 0;
    const Side side = (flags & 4) ? Side::client : Side::broker;
    switch (s.u8() % 12) {
      case 0:
      case 1: {
        const std::uint8_t n = s.u8();
        return in(side, s.run(n), ahead);
      }
      case 2:
      case 3:
        return in(Side::broker, delivery(s, ch), ahead);
      case 4:
        return in(Side::client, settlement(s, ch), ahead);
      case 5:
        return in(Side::client, method(ch, nackguard::amqp::BasicRecover{ahead}), false);
      case 6:
      case 7:
        return in(Side::broker, proxy_channel_answer(s), ahead);
      case 8:
        return in(side, close(ch, s.u8()), false);
      case 9: {
        nackguard::amqp::BasicPublish publish;
        publish.routing_key = "elsewhere";
        const std::uint64_t size = s.u8() + 1;
        return in(Side::client,
                  session::test::cat({method(ch, publish), session::test::header(ch, size)}),
                  false);
      }
      case 10:
        now_ += s.u8() * 250;
        session_.on_tick(now_);
        return drain();
      default:
        if (s.u8() == 0) {
          session_.on_eof(side);
          drain();
        }
        return;
    }
  }

  bool finished() const { return session_.finished(); }
  const std::string& broken() const {
    return to_client_.broken.empty() ? to_broker_.broken : to_client_.broken;
  }

 private:
  static nackguard::retry::GuardSettings settings() {
    nackguard::retry::GuardSettings g;
    g.tracker_max_entries = 64;
    g.retained_body_bytes = 64 << 10;
    g.max_queue_facts = 16;
    return g;
  }
  session::SessionOptions options() {
    session::SessionOptions o;
    o.body_budget = &context_.budget();
    return o;
  }

  // A delivery of one of four messages, perhaps redelivered or with a count.
  Bytes delivery(Script& s, std::uint16_t ch) {
    nackguard::amqp::BasicProperties props;
    props.message_id = "m" + std::to_string(s.u8() % 4);
    const std::uint8_t counts = s.u8();
    if (counts & 3) {
      props.headers.emplace();
      if (counts & 1)
        props.headers->set("x-delivery-count", nackguard::amqp::FieldValue::i64(counts >> 4));
      if (counts & 2) {
        props.headers->set("x-nackguard-returns", nackguard::amqp::FieldValue::i64(counts >> 5));
        props.headers->set("x-nackguard-returns-queue",
                           nackguard::amqp::FieldValue::string("q" + std::to_string(ch)));
      }
    }
    const std::string body(s.u8(), 'b');
    const std::uint64_t tag = s.u8() + 1u;
    const std::size_t chunk = 1 + s.u8() % 64;
    nackguard::amqp::BasicDeliver d =
        session::test::deliver_method("c" + std::to_string(ch), tag, (counts & 4) != 0);
    return session::test::cat({method(ch, d), session::test::content(ch, body, props, chunk)});
  }

  Bytes settlement(Script& s, std::uint16_t ch) {
    const std::uint64_t tag = s.u8();
    const bool multiple = s.bit();
    const bool requeue = s.bit();
    switch (s.u8() % 3) {
      case 0:
        return method(ch, nackguard::amqp::BasicAck{tag, multiple});
      case 1:
        return method(ch, nackguard::amqp::BasicNack{tag, multiple, requeue});
      default:
        return method(ch, nackguard::amqp::BasicReject{tag, requeue});
    }
  }

  // What the broker says on the proxy's own channel.
  Bytes proxy_channel_answer(Script& s) {
    const std::uint8_t kind = s.u8();
    const std::uint64_t seq = s.u8();
    switch (kind % 8) {
      case 0:
        return method(kProxyChannel, nackguard::amqp::ChannelOpenOk{});
      case 1:
        return method(kProxyChannel, nackguard::amqp::ConfirmSelectOk{});
      case 2: {
        static const char* const kQueues[] = {"q1.dlq", "nackguard.delay.q2.100ms", "q2.dlq"};
        return method(kProxyChannel, nackguard::amqp::QueueDeclareOk{kQueues[seq % 3], 0, 0});
      }
      case 3:
        return method(kProxyChannel, nackguard::amqp::BasicAck{seq, (seq & 0x80) != 0});
      case 4:
        return method(kProxyChannel, nackguard::amqp::BasicNack{seq, (seq & 0x80) != 0, false});
      case 5: {
        nackguard::amqp::BasicReturn r;
        r.reply_code = 312;
        r.reply_text = "NO_ROUTE";
        r.routing_key = "q1.dlq";
        return session::test::cat(
            {method(kProxyChannel, r), session::test::content(kProxyChannel, "copy")});
      }
      case 6:
        return close(kProxyChannel, seq);
      default:
        return method(kProxyChannel, nackguard::amqp::ChannelCloseOk{});
    }
  }

  static Bytes close(std::uint16_t ch, std::uint8_t code) {
    nackguard::amqp::ChannelClose c;
    c.reply_code = code & 1 ? 404 : 406;
    c.reply_text = "closed by the script";
    return method(ch, c);
  }

  // `bytes` from `from` as a relay reads them: into input_space, then handled with a
  // send-ahead towards the other side (`ahead`) or without.
  void in(Side from, ByteView bytes, bool ahead) {
    while (!bytes.empty() && !session_.input_closed(from)) {
      std::span<std::uint8_t> space = session_.input_space(from, 4096);
      const std::size_t n = std::min(space.size(), bytes.size());
      std::memcpy(space.data(), bytes.data(), n);
      bytes = bytes.subspan(n);
      if (ahead) {
        ByteView sent = session_.receive_input(from, n);
        stream(session::other(from)).take(sent);
        session_.written_ahead(session::other(from), sent.size());
        session_.handle_input(from);
      } else {
        session_.commit_input(from, n);
      }
      drain();
      session_.finish_bookkeeping();
    }
  }

  // Takes what the session wrote to each side, as the relay does.
  void drain() {
    for (Side side : {Side::client, Side::broker}) {
      ByteView run = session_.forwarded(side);
      stream(side).take(run);
      session_.forwarded_written(side, run.size());
      Bytes& out = session_.output(side);
      stream(side).take(out);
      out.clear();
    }
  }

  Stream& stream(Side side) { return side == Side::client ? to_client_ : to_broker_; }

  std::int64_t now_ = 1'700'000'000'000;
  nackguard::retry::GuardContext context_;
  guard::Guard guard_;
  session::Session session_;
  Stream to_client_{false};
  Stream to_broker_{true};
};

// Runs the script `data` spells; what broke, or "" if every property held.
inline std::string run_script(ByteView data) {
  Script script(data.data(), data.size());
  Connection c;
  c.handshake();
  for (std::size_t i = 0; i < kMaxSteps && !script.done() && !c.finished(); ++i) {
    c.step(script);
    if (!c.broken().empty()) break;
  }
  return c.broken();
}

}  // namespace nackguard::session::fuzz
