// Whole runs of one message through several sidecars, each with its own tracker, and the broker
// in between (a simulation of what the broker keeps: the copy's headers, the redelivered flag,
// x-delivery-count). The promise: a poison is delivered exactly max_redeliveries + 1 times,
// whichever sidecar sees each delivery, a restarted one included; a message that was never
// the consumers' trouble is never dead-lettered, whatever the broker's counters say.

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "proxy/retry/outcome.hpp"
#include "retry/decision_support.hpp"

namespace nackguard::retry {
namespace {

using test::kApart;
using test::kT0;

Policy immediate(std::uint32_t max) {
  return test::immediate_policy(max, 1000);
}

struct Sidecar {
  TrackerEntry entry;
  bool has_entry = false;
  const TrackerEntry* find() const { return has_entry ? &entry : nullptr; }
};

// The broker's side of the run: what the next delivery carries.
struct Broker {
  CarriedCount message;
  std::uint64_t next_copy_id = 100;
  bool dead_lettered = false;
  int deliveries = 0;

  // The broker requeues the message (a forwarded requeue, a crash it handles itself).
  void requeue() {
    message.redelivered = true;
    ++message.broker;
  }
  // A quorum queue returns, and counts, a delivery that crossed its consumer's basic.cancel:
  // no sidecar saw it.
  void unseen_return() { requeue(); }
  // The proxy published a copy and acked the original; from a quorum queue (`quorum`) the copy
  // is exact: its flag counts nothing.
  void copy(const Decision& decision) {
    if (decision.action == Action::dead_letter) {
      dead_lettered = true;
      return;
    }
    message = CarriedCount{.nackguard = decision.returns,
                           .copy_id = next_copy_id++,
                           .flag_counts = !quorum,
                           .suspect = decision.suspect};
  }
  bool quorum = false;
};

class CountModel : public ::testing::Test {
 protected:
  std::mt19937_64 rng{7};
  std::int64_t now = kT0;
  Circumstances circumstances;

  // One delivery through `sidecar`; true if the consumer gets it. `suspect`: it is handed out
  // alone.
  bool deliver(const Policy& policy, Sidecar& sidecar, Broker& broker, bool* suspect = nullptr) {
    ++broker.deliveries;
    const Outcome out = decide_delivery(policy, sidecar.find(), broker.message, circumstances);
    EXPECT_NE(out.decision.action, Action::dead_letter) << "at delivery " << broker.deliveries;
    if (suspect) *suspect = out.suspect;
    if (out.decision.action == Action::forward) return true;
    --broker.deliveries;  // taken over before the consumer saw it
    broker.copy(out.decision);
    return false;
  }
  void nack(const Policy& policy, Sidecar& sidecar, Broker& broker) {
    now += kApart;
    ReturnEvent event{.wall_ms = now, .steady_ms = now, .carried = broker.message};
    const Outcome out = decide_requeue(policy, sidecar.entry, event, circumstances, rng);
    sidecar.has_entry = true;
    if (out.decision.action == Action::forward) {
      broker.requeue();
    } else {
      broker.copy(out.decision);
    }
  }
  void crash(const Policy& policy, Sidecar& sidecar, Broker& broker, bool solo) {
    now += kApart;
    ReturnEvent event{
        .wall_ms = now, .steady_ms = now, .carried = broker.message, .crash = true, .solo = solo};
    const Outcome out = decide_crash(policy, sidecar.entry, event, circumstances, rng);
    sidecar.has_entry = true;
    if (out.decision.action == Action::forward) {
      broker.requeue();
    } else {
      broker.copy(out.decision);
    }
  }
  // A poison that kills every consumer that holds it, delivered by three sidecars in turn: the
  // broker once it dead-lettered it, or after 100 turns. `quorum`: from a quorum queue.
  Broker crash_loop(const Policy& policy, bool quorum) {
    Broker broker;
    broker.quorum = quorum;
    std::vector<Sidecar> sidecars(3);
    for (std::size_t turn = 0; !broker.dead_lettered && turn < 100; ++turn) {
      Sidecar& sidecar = sidecars[turn % sidecars.size()];
      bool suspect = false;
      if (deliver(policy, sidecar, broker, &suspect)) crash(policy, sidecar, broker, suspect);
    }
    return broker;
  }
  // A poison that every consumer nacks, delivered by the sidecars in turn.
  int nack_loop(const Policy& policy, std::vector<Sidecar>& sidecars) {
    Broker broker;
    for (std::size_t turn = 0; !broker.dead_lettered && turn < 1000; ++turn) {
      Sidecar& sidecar = sidecars[turn % sidecars.size()];
      if (deliver(policy, sidecar, broker)) nack(policy, sidecar, broker);
    }
    return broker.deliveries;
  }
};

TEST_F(CountModel, OneSidecarDeliversAPoisonMaxPlusOneTimes) {
  for (std::uint32_t max = 0; max <= 6; ++max) {
    std::vector<Sidecar> sidecars(1);
    EXPECT_EQ(nack_loop(immediate(max), sidecars), static_cast<int>(max) + 1) << max;
  }
}

TEST_F(CountModel, SidecarsInTurnShareOneCount) {
  // Issue 37, defect 2: two sidecars nacking one poison in turn delivered it 6 and 7 times for
  // max_redeliveries 3.
  for (std::size_t n = 2; n <= 4; ++n) {
    for (std::uint32_t max = 0; max <= 6; ++max) {
      std::vector<Sidecar> sidecars(n);
      EXPECT_EQ(nack_loop(immediate(max), sidecars), static_cast<int>(max) + 1)
          << n << " sidecars, max " << max;
    }
  }
}

TEST_F(CountModel, SidecarsInTurnShareOneCountOnAQuorumQueueWithAnUnknownLimit) {
  circumstances.broker_limit = kAssumedBrokerLimit;
  for (std::uint32_t max = 0; max <= 6; ++max) {
    std::vector<Sidecar> sidecars(2);
    EXPECT_EQ(nack_loop(immediate(max), sidecars), static_cast<int>(max) + 1) << max;
  }
}

// A quorum queue redelivers what crossed a consumer's basic.cancel, redelivered and counted,
// though no consumer returned it (seen on 3.10.8 with a consumer per message: a poison was
// dead-lettered with returns 6 after 3 deliveries). Every copy from it is exact: such returns
// count nothing once the message has been copied.
TEST_F(CountModel, ReturnsNoConsumerMadeCountNothingOnAQuorumQueuesCopies) {
  circumstances.broker_limit = kAssumedBrokerLimit;
  for (std::uint32_t max = 1; max <= 6; ++max) {
    std::vector<Sidecar> sidecars(2);
    Broker broker;
    broker.quorum = true;
    const Policy policy = immediate(max);
    for (std::size_t turn = 0; !broker.dead_lettered && turn < 1000; ++turn) {
      Sidecar& sidecar = sidecars[turn % sidecars.size()];
      if (broker.message.copy_id != 0 && turn % 2 == 0) broker.unseen_return();
      if (deliver(policy, sidecar, broker)) nack(policy, sidecar, broker);
    }
    EXPECT_EQ(broker.deliveries, static_cast<int>(max) + 1) << max;
  }
}

TEST_F(CountModel, ARestartedSidecarForgetsNothing) {
  // Issue 37, defect 3: requeued twice, the sidecar killed and restarted: 6 deliveries, not 4.
  const Policy policy = immediate(3);
  Broker broker;
  Sidecar first;
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(deliver(policy, first, broker));
    nack(policy, first, broker);
  }
  Sidecar restarted;  // kill -9: its tracker is gone
  while (!broker.dead_lettered && broker.deliveries < 100) {
    if (deliver(policy, restarted, broker)) nack(policy, restarted, broker);
  }
  EXPECT_EQ(broker.deliveries, 4);
}

TEST_F(CountModel, ACrashLoopAcrossSidecarsIsCountedExactly) {
  // The poison kills every consumer that holds it; in a sidecar deployment the next delivery
  // goes to another consumer, behind another sidecar. It is in the consumer's hands with
  // others (its prefetch) unless it is a suspect, handed out alone.
  for (std::uint32_t max = 0; max <= 6; ++max) {
    const Broker broker = crash_loop(immediate(max), false);
    EXPECT_TRUE(broker.dead_lettered) << max;
    // The first crash holds its prefetch, the second too on another sidecar that knew nothing
    // of the first; a crash with others in hand counts but never dead-letters. From
    // max_redeliveries 2 on, exactly max + 1 deliveries.
    if (max >= 2) {
      EXPECT_EQ(broker.deliveries, static_cast<int>(max) + 1) << max;
    } else {
      EXPECT_EQ(broker.deliveries, 3) << max;
    }
  }
}

// On a quorum queue every crash return is a copy marked suspect, so whichever sidecar
// delivers it next hands it out alone (the randomized ledger test saw crash-poisons delivered
// 5 to 10 times for max 3: forwarded, their redelivery was republished by a sidecar that knew
// nothing of the crash, and each crash held a prefetch).
TEST_F(CountModel, ACrashLoopAcrossSidecarsOnAQuorumQueueIsIsolatedAtTheFirstCrash) {
  circumstances.broker_limit = kAssumedBrokerLimit;
  circumstances.quorum_queue = true;
  for (std::uint32_t max = 0; max <= 6; ++max) {
    const Broker broker = crash_loop(immediate(max), true);
    EXPECT_TRUE(broker.dead_lettered) << max;
    EXPECT_EQ(broker.deliveries, static_cast<int>(std::max(max, 1u)) + 1) << max;
  }
}

TEST_F(CountModel, ACrashLoopThroughOneSidecarIsIsolatedAtOnce) {
  for (std::uint32_t max = 1; max <= 6; ++max) {
    const Policy policy = immediate(max);
    Broker broker;
    Sidecar sidecar;
    for (int turn = 0; !broker.dead_lettered && turn < 100; ++turn) {
      bool suspect = false;
      if (deliver(policy, sidecar, broker, &suspect)) crash(policy, sidecar, broker, suspect);
    }
    EXPECT_EQ(broker.deliveries, static_cast<int>(max) + 1) << max;
  }
}

TEST_F(CountModel, AMessageHeldBackBehindCrashesIsNeverDeadLettered) {
  // Issue 37, defect 1: P1 handed out alone, the consumer crashing on it again and again, G
  // waiting in the proxy behind it each time. The broker counts every crash against G too.
  const Policy policy = immediate(3);
  circumstances.broker_limit = 20;
  Broker g;
  Sidecar holder, other;
  ++g.deliveries;  // G's first delivery: a prefetched message, in a batch crash
  crash(policy, holder, g, /*solo=*/false);
  for (int i = 0; i < 5; ++i) {
    // Delivered again, it waits behind the poison; the consumer's crash returns it uncounted.
    note_uncounted_return(holder.entry, g.message);
    g.requeue();
  }
  // Now it reaches a consumer, behind another sidecar that knows nothing of it.
  ASSERT_TRUE(deliver(policy, other, g));
  EXPECT_FALSE(g.dead_lettered);
  // Even a crash of that consumer with G among others in hand does not dead-letter it.
  crash(policy, other, g, /*solo=*/false);
  EXPECT_FALSE(g.dead_lettered);
}

}  // namespace
}  // namespace nackguard::retry
