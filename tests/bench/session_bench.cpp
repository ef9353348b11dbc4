// The passthrough path without sockets: nanoseconds per frame and bytes per second.
//   - FrameDecoder alone over a stream of basic.deliver + content header + 1 KiB body frames;
//   - a Session past its handshake, with a consumer on channel 1, fed that stream from the
//     broker in 64 KiB reads and the client's basic.ack for each delivery,
//     with a trivial observer and with the production Guard (tracker, policies, retained
//     bodies);
//   - the publishing direction: basic.publish + header + body from the client, and the
//     broker's confirms;
//   - the deliveries read as the relay reads them, with and without the check for a lone
//     first delivery it may write ahead (Session::receive_input), in 64 KiB reads (under load)
//     and one delivery per read (one message at a time).
// Each iteration moves one batch of 100 messages (a prefetch's worth). The output the session
// writes is moved out and cleared each time, as the relay's writer does. Figures are recorded
// in docs/performance.md. The reads stay at 64 KiB, what net::Relay read when these
// benchmarks were written (it now reads up to net::Relay::kReadChunk, 256 KiB), so that the
// figures of every version compare.

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "proxy/amqp/frame.hpp"
#include "proxy/amqp/method_codec.hpp"
#include "proxy/amqp/methods.hpp"
#include "proxy/guard/guard.hpp"
#include "proxy/retry/guard_context.hpp"
#include "proxy/retry/policy_set.hpp"
#include "proxy/session/session.hpp"
#include "tests/unit/session/relay_read.hpp"

namespace nackguard::session {
namespace {

using guard::Guard;
using guard::guarded;

using amqp::Bytes;
using amqp::ByteView;

constexpr std::size_t kBodyBytes = 1024;
constexpr std::size_t kBatch = 100;
constexpr std::size_t kReadChunk = 64 * 1024;  // not net::Relay::kReadChunk: see above
constexpr std::uint16_t kChannel = 1;
const std::string kConsumerTag = "amq.ctag-vQd8R5bfZyBMf-Ok6a2d7w";
const std::string kQueue = "bench.orders";

template <typename M>
Bytes method(std::uint16_t channel, const M& m) {
  Bytes out;
  if (!amqp::append_method_frame(out, channel, m)) std::abort();  // the bench's own frames
  return out;
}

void append(Bytes& out, const Bytes& more) {
  out.insert(out.end(), more.begin(), more.end());
}

void put_u64(Bytes& bytes, std::size_t at, std::uint64_t value) {
  for (int i = 7; i >= 0; --i) {
    bytes[at + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(value);
    value >>= 8;
  }
}

// What a typical publisher sets: a message id, a content type, transient delivery.
Bytes content_frames(std::uint16_t channel) {
  amqp::ContentHeader header;
  header.body_size = kBodyBytes;
  header.properties.content_type = "application/json";
  header.properties.delivery_mode = 1;
  header.properties.message_id = "4f1c2a9e-6b1d-4c55-9a53-0d0c3f6b8e21";
  Bytes out;
  if (!amqp::append_content_header_frame(out, channel, header)) std::abort();
  Bytes body(kBodyBytes);
  for (std::size_t i = 0; i < body.size(); ++i) body[i] = static_cast<std::uint8_t>('a' + i % 26);
  amqp::append_frame(out, amqp::FrameType::body, channel, body);
  return out;
}

// A batch of frames of one kind, with the offset of each delivery tag so the batch can be
// renumbered in place for the next iteration.
struct Batch {
  Bytes bytes;
  std::vector<std::size_t> tag_offsets;
  std::vector<std::size_t> frame_ends;  // for feeding frame by frame

  // Appends one piece for feed_frame_by_frame: a method frame and its content frames, if any.
  void add(const Bytes& method_frame, const Bytes& content = {}) {
    append(bytes, method_frame);
    append(bytes, content);
    frame_ends.push_back(bytes.size());
  }

  void renumber(std::uint64_t first_tag) {
    for (std::size_t i = 0; i < tag_offsets.size(); ++i)
      put_u64(bytes, tag_offsets[i], first_tag + i);
  }
};

constexpr std::size_t kFrameHeader = 7;
constexpr std::size_t kMethodIds = 4;

Batch deliveries() {
  const Bytes content = content_frames(kChannel);
  amqp::BasicDeliver deliver;
  deliver.consumer_tag = kConsumerTag;
  deliver.exchange = "";
  deliver.routing_key = kQueue;
  Batch batch;
  for (std::size_t i = 0; i < kBatch; ++i) {
    deliver.delivery_tag = i + 1;
    batch.tag_offsets.push_back(batch.bytes.size() + kFrameHeader + kMethodIds + 1 +
                                kConsumerTag.size());
    batch.add(method(kChannel, deliver), content);
  }
  return batch;
}

Batch acks() {
  Batch batch;
  for (std::size_t i = 0; i < kBatch; ++i) {
    batch.tag_offsets.push_back(batch.bytes.size() + kFrameHeader + kMethodIds);
    batch.add(method(kChannel, amqp::BasicAck{i + 1, false}));
  }
  return batch;
}

// kBatch times the same publish: it has no tag to renumber.
Batch publishes() {
  amqp::BasicPublish publish;
  publish.routing_key = kQueue;
  const Bytes frame = method(kChannel, publish);
  const Bytes content = content_frames(kChannel);
  Batch batch;
  for (std::size_t i = 0; i < kBatch; ++i) batch.add(frame, content);
  return batch;
}

// Output is moved out and cleared, as the relay's writer swaps it into its own buffer.
void drain(Session& session, Bytes& scratch) {
  for (Side side : {Side::client, Side::broker}) {
    scratch.swap(session.output(side));
    benchmark::DoNotOptimize(scratch.data());
    scratch.clear();
  }
}

void feed_in_reads(Session& session, Side from, const Bytes& bytes) {
  for (std::size_t at = 0; at < bytes.size(); at += kReadChunk) {
    const std::size_t n = std::min(kReadChunk, bytes.size() - at);
    session.feed(from, ByteView(bytes.data() + at, n));
  }
}

void feed_frame_by_frame(Session& session, Side from, const Batch& batch) {
  std::size_t begin = 0;
  for (std::size_t end : batch.frame_ends) {
    session.feed(from, ByteView(batch.bytes.data() + begin, end - begin));
    begin = end;
  }
}

// Connection handshake, channel 1 opened, a consumer on kQueue (and confirm mode, unused by
// the consuming benchmarks).
bool open_session(Session& session) {
  Bytes scratch;
  session.feed(Side::client, ByteView(amqp::kProtocolHeader, sizeof amqp::kProtocolHeader));
  amqp::ConnectionStart start;
  start.server_properties.set("product", amqp::FieldValue::string("RabbitMQ"));
  start.mechanisms = "PLAIN AMQPLAIN";
  start.locales = "en_US";
  session.feed(Side::broker, method(0, start));
  amqp::ConnectionStartOk start_ok;
  start_ok.mechanism = "PLAIN";
  start_ok.response = std::string("\0guest\0guest", 12);
  start_ok.locale = "en_US";
  session.feed(Side::client, method(0, start_ok));
  session.feed(Side::broker, method(0, amqp::ConnectionTune{2047, 131072, 0}));
  drain(session, scratch);
  amqp::ConnectionTuneOk tune_ok;
  tune_ok.channel_max = 2046;
  tune_ok.frame_max = 131072;
  tune_ok.heartbeat = 0;
  session.feed(Side::client, method(0, tune_ok));
  amqp::ConnectionOpen open;
  open.virtual_host = "/";
  session.feed(Side::client, method(0, open));
  session.feed(Side::broker, method(0, amqp::ConnectionOpenOk{}));
  session.feed(Side::client, method(kChannel, amqp::ChannelOpen{}));
  session.feed(Side::broker, method(kChannel, amqp::ChannelOpenOk{}));
  session.feed(Side::client, method(kChannel, amqp::BasicQos{0, 100, false}));
  session.feed(Side::broker, method(kChannel, amqp::BasicQosOk{}));
  session.feed(Side::client, method(kChannel, amqp::ConfirmSelect{}));
  session.feed(Side::broker, method(kChannel, amqp::ConfirmSelectOk{}));
  amqp::BasicConsume consume;
  consume.queue = kQueue;
  session.feed(Side::client, method(kChannel, consume));
  session.feed(Side::broker, method(kChannel, amqp::BasicConsumeOk{kConsumerTag}));
  drain(session, scratch);
  return session.is_open() && session.channel(kChannel) != nullptr;
}

// Session options whose retained bodies count against `context`'s budget.
SessionOptions budgeted_by(retry::GuardContext& context) {
  SessionOptions options;
  options.body_budget = &context.budget();
  return options;
}

// The production observer and everything it shares, with the default policy, and a session it
// observes (not yet opened: open_session).
struct GuardRig {
  retry::GuardContext context{retry::GuardSettings{}, std::make_shared<const retry::PolicySet>(),
                              nullptr};
  Guard guard{context, 1};
  Session session{guarded(budgeted_by(context), context), &guard};
};

void set_rates(benchmark::State& state, std::size_t frames_per_batch, std::size_t bytes) {
  const auto batches = static_cast<std::int64_t>(state.iterations());
  state.SetItemsProcessed(batches * static_cast<std::int64_t>(kBatch));
  state.SetBytesProcessed(batches * static_cast<std::int64_t>(bytes));
  state.counters["frame"] = benchmark::Counter(
      static_cast<double>(frames_per_batch),
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void BM_FrameDecoder_Deliveries(benchmark::State& state) {
  const Batch batch = deliveries();
  const amqp::FrameDecoder decoder(131072);
  for (auto _ : state) {
    ByteView in(batch.bytes);
    while (!in.empty()) {
      amqp::FrameResult r = decoder.decode(in);
      benchmark::DoNotOptimize(r);
      if (r.status != amqp::FrameResult::Status::frame) {
        state.SkipWithError("the stream did not decode");
        return;
      }
      in = in.subspan(r.frame.raw.size());
    }
  }
  set_rates(state, 3 * kBatch, batch.bytes.size());
}
BENCHMARK(BM_FrameDecoder_Deliveries);

// Opens `session`, then each iteration: `reads` from `from` in 64 KiB reads, then `replies`
// from the other side one frame per read, both renumbered from the next tag on.
void read_reply_loop(benchmark::State& state, Session& session, Side from, Batch reads,
                     Batch replies) {
  if (!open_session(session)) return state.SkipWithError("handshake failed");
  Bytes scratch;
  std::uint64_t next_tag = 1;
  for (auto _ : state) {
    reads.renumber(next_tag);  // publishes carry no tag: nothing to do
    replies.renumber(next_tag);
    next_tag += kBatch;
    feed_in_reads(session, from, reads.bytes);
    drain(session, scratch);
    feed_frame_by_frame(session, other(from), replies);
    drain(session, scratch);
  }
  const ChannelState* ch = session.channel(kChannel);
  if (ch == nullptr) state.SkipWithError("channel 1 is gone: the stream was refused");
  set_rates(state, 4 * kBatch, reads.bytes.size() + replies.bytes.size());
}

// Deliveries from the broker in 64 KiB reads, then one read per basic.ack from the client.
void BM_Session_DeliverAck_TrivialObserver(benchmark::State& state) {
  SessionObserver trivial;
  Session session(SessionOptions{}, &trivial);
  read_reply_loop(state, session, Side::broker, deliveries(), acks());
}
BENCHMARK(BM_Session_DeliverAck_TrivialObserver);

void BM_Session_DeliverAck_Guard(benchmark::State& state) {
  GuardRig rig;
  read_reply_loop(state, rig.session, Side::broker, deliveries(), acks());
}
BENCHMARK(BM_Session_DeliverAck_Guard);

// Publishes from the client in 64 KiB reads, then the broker's confirm for each.
void BM_Session_PublishConfirm_Guard(benchmark::State& state) {
  GuardRig rig;
  read_reply_loop(state, rig.session, Side::client, publishes(), acks());
}
BENCHMARK(BM_Session_PublishConfirm_Guard);

// The deliveries read as net::Relay reads them, each read written out before the next:
// ahead=1 through receive_input (the relay over plain TCP while it is not writing: a lone
// first delivery goes ahead), ahead=0 through commit_input (while it writes, or over TLS).
// lone=0 in 64 KiB reads, lone=1 one delivery per read.
void BM_Session_DeliverAck_Guard_RelayReads(benchmark::State& state) {
  const bool ahead = state.range(0) != 0;
  const bool lone = state.range(1) != 0;
  GuardRig rig;
  Session& session = rig.session;
  if (!open_session(session)) return state.SkipWithError("handshake failed");
  Batch deliver = deliveries();
  Batch ack = acks();
  std::vector<std::size_t> read_ends = deliver.frame_ends;
  if (!lone) {
    read_ends.clear();
    for (std::size_t at = kReadChunk; at < deliver.bytes.size(); at += kReadChunk)
      read_ends.push_back(at);
    read_ends.push_back(deliver.bytes.size());
  }
  Bytes scratch;
  std::uint64_t next_tag = 1;
  std::size_t went_ahead = 0;
  for (auto _ : state) {
    deliver.renumber(next_tag);
    ack.renumber(next_tag);
    next_tag += kBatch;
    std::size_t begin = 0;
    for (std::size_t end : read_ends) {
      const ByteView read(deliver.bytes.data() + begin, end - begin);
      if (ahead) {
        went_ahead += relay_read(session, read, [](ByteView offered) {
                        benchmark::DoNotOptimize(offered.data());
                        return offered.size();
                      }).size();
      } else {
        relay_read_in_turn(session, read);
      }
      drain(session, scratch);
      begin = end;
    }
    feed_frame_by_frame(session, Side::client, ack);
    drain(session, scratch);
  }
  if (session.channel(kChannel) == nullptr) state.SkipWithError("channel 1 is gone");
  state.counters["ahead"] = benchmark::Counter(
      static_cast<double>(went_ahead) / static_cast<double>(deliver.bytes.size()),
      benchmark::Counter::kAvgIterations);
  set_rates(state, 4 * kBatch, deliver.bytes.size() + ack.bytes.size());
}
BENCHMARK(BM_Session_DeliverAck_Guard_RelayReads)
    ->ArgsProduct({{0, 1}, {0, 1}})
    ->ArgNames({"ahead", "lone"});

}  // namespace
}  // namespace nackguard::session

BENCHMARK_MAIN();
