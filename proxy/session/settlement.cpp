#include "proxy/session/settlement.hpp"

#include <limits>

#include "proxy/amqp/method_codec.hpp"

namespace nackguard::session {

namespace {

// A tag the broker never issued, so a client's ack of an unknown tag still fails there.
constexpr std::uint64_t kUnknownTagBit = std::uint64_t{1} << 63;

}  // namespace

void append_settlement(amqp::Bytes& out, std::uint16_t channel, SettleKind kind, std::uint64_t tag,
                       bool multiple, bool requeue) {
  switch (kind) {
    case SettleKind::ack:
      amqp::append_fixed_method_frame(out, channel, amqp::BasicAck{tag, multiple});
      break;
    case SettleKind::nack:
      amqp::append_fixed_method_frame(out, channel, amqp::BasicNack{tag, multiple, requeue});
      break;
    case SettleKind::reject:
      amqp::append_fixed_method_frame(out, channel, amqp::BasicReject{tag, requeue});
      break;
  }
}

void append_client_settlement(amqp::Bytes& out, const ChannelState& ch, const ClientSettlement& c,
                              const std::vector<Delivery>& settled,
                              const std::vector<const Delivery*>& forwarded) {
  const auto [channel, kind, tag, multiple, requeue, unknown] = c;
  // A delivery forwarded with no record (the budget was full) is outstanding at the broker
  // under its run's offset from the client's tag.
  // (A plain tag and flag: GCC's -O2 takes a std::optional here for maybe-uninitialized.)
  const std::optional<std::uint64_t> found = unknown ? std::nullopt : ch.untracked_broker_tag(tag);
  const bool untracked = found.has_value();
  const std::uint64_t untracked_tag = found.value_or(0);
  bool untracked_all = multiple && tag == 0 && ch.has_untracked();
  if (!multiple && untracked && settled.empty()) {
    append_settlement(out, channel, kind, untracked_tag, false, requeue);
  } else if (multiple && (untracked || untracked_all)) {
    // One multiple settlement, as the client sent it, if it takes nothing of the proxy's;
    // else the recorded ones alone (the untracked ones stay with the broker, which
    // delivers them again when the channel ends: a duplicate, never a loss).
    std::uint64_t top = untracked ? untracked_tag : 0;
    std::uint64_t reach = untracked ? untracked_tag : std::numeric_limits<std::uint64_t>::max();
    if (forwarded.size() == settled.size() && !ch.owned_at_or_below(reach) &&
        !ch.unacked_at_or_below(reach)) {
      append_settlement(out, channel, kind, top, true, requeue);
    } else {
      for (const Delivery* d : forwarded) {
        append_settlement(out, channel, kind, d->broker_tag, false, requeue);
      }
    }
  } else if (settled.empty()) {
    // Nothing of the client's is outstanding: "all" settles nothing; an unknown tag must
    // still fail at the broker, and must not name a delivery the proxy owns.
    if (!(multiple && tag == 0)) {
      append_settlement(out, channel, kind, kUnknownTagBit | tag, multiple, requeue);
    }
  } else if (!forwarded.empty()) {
    std::uint64_t highest = forwarded.back()->broker_tag;
    if (!multiple) {
      append_settlement(out, channel, kind, highest, false, requeue);
    } else if (forwarded.size() == settled.size() && !ch.owned_at_or_below(highest) &&
               !ch.unacked_at_or_below(highest)) {
      append_settlement(out, channel, kind, highest, true, requeue);
    } else {
      // A multiple settlement would take deliveries the proxy owns, or (after a reorder)
      // ones the client did not name, with it: expand.
      for (const Delivery* d : forwarded) {
        append_settlement(out, channel, kind, d->broker_tag, false, requeue);
      }
    }
  }
}

}  // namespace nackguard::session
