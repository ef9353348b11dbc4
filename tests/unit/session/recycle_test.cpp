// A delivery in the usual flow (deliver, then the client's ack) allocates nothing once the
// channel has settled a few: basic.deliver is decoded into reused strings, and a settled
// delivery's buffers and map node serve the next one (ChannelState::recycle). Counted with a
// replacement operator new that counts only while a test asks it to.

#include <gtest/gtest.h>

#include <cstdlib>
#include <new>

#include "session/script.hpp"

namespace {
std::size_t g_allocations = 0;
bool g_counting = false;
}  // namespace

// Under AddressSanitizer or ThreadSanitizer the sanitizer owns operator new and delete (its
// nothrow and aligned forms too, which the standard library pairs with the plain ones): the
// counting tests are skipped there rather than replace half of the allocator.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define NACKGUARD_COUNTS_ALLOCATIONS 0
#else
#define NACKGUARD_COUNTS_ALLOCATIONS 1
void* operator new(std::size_t size) {
  if (g_counting) ++g_allocations;
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  if (g_counting) ++g_allocations;
  return std::malloc(size == 0 ? 1 : size);
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
#endif

namespace nackguard::session::test {
namespace {

// RabbitMQ's generated consumer tags are 31 bytes, and queue names are often longer than
// std::string's 15 inline bytes: every one of these strings is on the heap.
const std::string kTag = "amq.ctag-Vb3kT0q8dMZ2aLwQx1yJfA";
const std::string kQueue = "orders.invoice-rendering.v2";

class Recycle : public ::testing::Test {
 protected:
  Recycle() : link(SessionOptions{}, quiet) {}
  void SetUp() override {
    if (!NACKGUARD_COUNTS_ALLOCATIONS) GTEST_SKIP() << "allocations are the sanitizer's";
    handshake(link);
    amqp::BasicConsume consume;
    consume.queue = kQueue;
    consume.consumer_tag = kTag;
    link.client(method(1, consume));
    link.broker(method(1, amqp::BasicConsumeOk{kTag}));
    clear_output();
  }
  // The frames of deliveries first..last and their acks, built before anything is counted.
  void build(std::uint64_t first, std::uint64_t last) {
    for (std::uint64_t tag = first; tag <= last; ++tag) {
      amqp::BasicProperties props;
      // Of one length: a header that grows would (rightly) grow its buffer.
      std::string number = std::to_string(tag);
      props.message_id = "message-" + std::string(6 - number.size(), '0') + number + "-long-id";
      delivers.push_back(cat(
          {method(1, deliver_method(kTag, tag, false, "", kQueue)), content(1, "a body", props)}));
      acks.push_back(ack(1, tag));
    }
  }
  // Output cleared in place: its buffers keep their capacity, as a relay's do.
  void clear_output() {
    link.session.output(Side::client).clear();
    link.session.output(Side::broker).clear();
  }
  // Feeds deliveries [from, from + burst) and then their acks, one by one.
  void burst(std::size_t from, std::size_t burst) {
    for (std::size_t i = from; i < from + burst; ++i) link.broker(delivers[i]);
    clear_output();
    for (std::size_t i = from; i < from + burst; ++i) link.client(acks[i]);
    clear_output();
  }
  std::size_t counted(std::size_t from, std::size_t rounds, std::size_t size) {
    g_allocations = 0;
    g_counting = true;
    for (std::size_t r = 0; r < rounds; ++r) burst(from + r * size, size);
    g_counting = false;
    return g_allocations;
  }

  SessionObserver quiet;  // plans to forward, records nothing
  Link link;
  std::vector<Bytes> delivers, acks;
};

TEST_F(Recycle, DeliverThenAckOneByOneAllocatesNothing) {
  build(1, 120);
  for (std::size_t i = 0; i < 20; ++i) burst(i, 1);  // warm up: buffers reach their sizes
  EXPECT_EQ(counted(20, 100, 1), 0u);
  EXPECT_EQ(link.session.channel(1)->unacked_count(), 0u);
}

TEST_F(Recycle, BurstsUpToTheSpareCountAllocateNothing) {
  constexpr std::size_t kBurst = ChannelState::kSpareDeliveries;
  build(1, 30 * kBurst);
  for (std::size_t r = 0; r < 5; ++r) burst(r * kBurst, kBurst);
  EXPECT_EQ(counted(5 * kBurst, 25, kBurst), 0u);
}

TEST_F(Recycle, AMultipleAckKeepsNodesToo) {
  constexpr std::size_t kBurst = ChannelState::kSpareDeliveries;
  build(1, 30 * kBurst);
  std::vector<Bytes> multiple_acks;
  for (std::size_t r = 0; r < 30; ++r) multiple_acks.push_back(ack(1, (r + 1) * kBurst, true));
  auto round = [&](std::size_t r) {
    for (std::size_t i = r * kBurst; i < (r + 1) * kBurst; ++i) link.broker(delivers[i]);
    clear_output();
    link.client(multiple_acks[r]);
    clear_output();
  };
  for (std::size_t r = 0; r < 5; ++r) round(r);
  g_allocations = 0;
  g_counting = true;
  for (std::size_t r = 5; r < 30; ++r) round(r);
  g_counting = false;
  EXPECT_EQ(g_allocations, 0u);
  EXPECT_EQ(link.session.channel(1)->unacked_count(), 0u);
}

Delivery heap_delivery(std::size_t header_bytes) {
  Delivery d;
  d.consumer_tag = kTag;
  d.queue = kQueue;
  d.routing_key = kQueue;
  d.exchange = "exchange.with.a.long.name";
  d.header_payload.assign(header_bytes, 0x42);
  return d;
}

TEST(ChannelRecycle, AFreshDeliveryTakesASettledOnesBuffersEmptyAndWithoutItsBody) {
  ChannelState ch;
  Delivery d = heap_delivery(200);
  d.broker_tag = 7;
  d.redelivered = true;
  d.body = retry::RetainedBody::make(nullptr, 6);
  std::shared_ptr<retry::RetainedBody> body = d.body;
  const char* tag_buffer = d.consumer_tag.data();
  ch.recycle(std::move(d));
  EXPECT_EQ(body.use_count(), 1) << "a spare delivery must not keep its body";

  Delivery fresh = ch.fresh_delivery();
  EXPECT_EQ(fresh.consumer_tag.data(), tag_buffer);
  EXPECT_TRUE(fresh.consumer_tag.empty());
  EXPECT_TRUE(fresh.queue.empty());
  EXPECT_TRUE(fresh.exchange.empty());
  EXPECT_TRUE(fresh.routing_key.empty());
  EXPECT_TRUE(fresh.header_payload.empty());
  EXPECT_GE(fresh.header_payload.capacity(), 200u);
  EXPECT_EQ(fresh.broker_tag, 0u);
  EXPECT_FALSE(fresh.redelivered);
  EXPECT_FALSE(fresh.body);
  // The spare is used up: the next one is new.
  EXPECT_EQ(ch.fresh_delivery().header_payload.capacity(), 0u);
}

TEST(ChannelRecycle, SparesAreBoundedInNumberAndSize) {
  ChannelState ch;
  for (std::size_t i = 0; i < ChannelState::kSpareDeliveries + 3; ++i) {
    ch.recycle(heap_delivery(100));
  }
  ch.recycle(heap_delivery(ChannelState::kMaxSpareHeader + 1));
  std::size_t reused = 0;
  for (std::size_t i = 0; i < ChannelState::kSpareDeliveries + 4; ++i) {
    if (ch.fresh_delivery().header_payload.capacity() > 0) ++reused;
  }
  EXPECT_EQ(reused, ChannelState::kSpareDeliveries);

  ChannelState big;
  big.recycle(heap_delivery(ChannelState::kMaxSpareHeader + 1));
  EXPECT_EQ(big.fresh_delivery().header_payload.capacity(), 0u);
}

}  // namespace
}  // namespace nackguard::session::test
