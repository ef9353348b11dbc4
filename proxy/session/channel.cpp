#include "proxy/session/channel.hpp"

#include <xxhash.h>
#include <algorithm>

namespace nackguard::session {

std::string_view to_string(ReturnCause cause) {
  switch (cause) {
    case ReturnCause::nack:
      return "nack";
    case ReturnCause::reject:
      return "reject";
    case ReturnCause::recover:
      return "recover";
    case ReturnCause::channel_closed:
      return "channel_closed";
    case ReturnCause::connection_closed:
      return "connection_closed";
    case ReturnCause::broker_lost:
      return "broker_lost";
    case ReturnCause::consumer_timeout:
      return "consumer_timeout";
    case ReturnCause::unseen:
      return "unseen";
  }
  return "unknown";
}

BodyHash::operator std::uint64_t() const {
  if (!source_.expired()) {
    if (std::shared_ptr<const retry::RetainedBody> body = source_.lock()) {
      value_ = XXH3_64bits(body->bytes.data(), body->bytes.size());
    }
    source_.reset();
  }
  return value_;
}

BodyHasher::BodyHasher() : state_(XXH3_createState()) {
  reset();
}
BodyHasher::~BodyHasher() {
  XXH3_freeState(static_cast<XXH3_state_t*>(state_));
}
void BodyHasher::reset() {
  XXH3_64bits_reset(static_cast<XXH3_state_t*>(state_));
}
void BodyHasher::update(amqp::ByteView bytes) {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), bytes.data(), bytes.size());
}
std::uint64_t BodyHasher::digest() const {
  return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(state_));
}

const Consumer* ConsumerBook::find(const std::string& tag) const {
  auto it = consumers.find(tag);
  if (it != consumers.end()) return &it->second;
  for (const auto& [cancelled, consumer] : cancelled) {
    if (cancelled == tag) return &consumer;
  }
  return nullptr;
}

void ConsumerBook::forget(const std::string& tag) {
  auto it = consumers.find(tag);
  if (it == consumers.end()) return;
  constexpr std::size_t kRemembered = 16;
  if (cancelled.size() >= kRemembered) cancelled.pop_front();
  cancelled.emplace_back(it->first, std::move(it->second));
  consumers.erase(it);
}

namespace {
// A string's heap block, if it has one (libstdc++ keeps up to 15 characters inline), with
// malloc's header and rounding.
std::uint64_t heap_bytes(const std::string& s) {
  return s.capacity() > 15 ? ((s.capacity() + 1 + 8 + 15) & ~std::uint64_t{15}) : 0;
}
}  // namespace

std::uint64_t ChannelState::record_cost(const Delivery& d) {
  // The map node: three pointers and a colour, the key, the record, and malloc's header.
  constexpr std::uint64_t kNodeBytes = 32 + 8 + sizeof(Delivery) + sizeof(std::uint64_t) + 16;
  std::uint64_t header = d.header_payload.capacity();
  if (header != 0) header = (header + 8 + 15) & ~std::uint64_t{15};
  return kNodeBytes + header + heap_bytes(d.consumer_tag) + heap_bytes(d.queue) +
         heap_bytes(d.exchange) + heap_bytes(d.routing_key);
}

void ChannelState::make_slim(Delivery& d) {
  amqp::Bytes().swap(d.header_payload);
  std::string().swap(d.consumer_tag);
  std::string().swap(d.queue);
  std::string().swap(d.exchange);
  std::string().swap(d.routing_key);
  d.body.reset();
}

bool ChannelState::note_untracked(std::uint64_t client_tag, std::uint64_t broker_tag) {
  bool new_run = false;
  if (!tags_.note_untracked(client_tag, broker_tag, &new_run)) return false;
  if (new_run) records_charge_.add(TagMap::kRunBytes);  // charged while the channel lives
  return true;
}

std::optional<std::uint64_t> ChannelState::untracked_broker_tag(std::uint64_t tag) const {
  std::optional<std::uint64_t> broker_tag = tags_.run_broker_tag(tag);
  // A tag in a run may have a record after all, or be the proxy's.
  if (!broker_tag || unacked_.contains(tag) || taken_over_.contains(*broker_tag)) {
    return std::nullopt;
  }
  return broker_tag;
}

ChannelState::Record ChannelState::make_record(Delivery delivery) {
  Record record{std::move(delivery), 0};
  record.cost = record_cost(record.delivery);
  records_charge_.add(record.cost);
  return record;
}

Delivery ChannelState::drop_record(Record& record) {
  records_charge_.sub(record.cost);
  record.cost = 0;
  return std::move(record.delivery);
}

Delivery ChannelState::fresh_delivery() {
  Delivery d;
  if (spare_deliveries_.empty()) return d;
  Delivery& spare = spare_deliveries_.back();
  auto reuse = [](auto& to, auto& from) {
    to = std::move(from);  // takes its buffer
    to.clear();
  };
  reuse(d.consumer_tag, spare.consumer_tag);
  reuse(d.queue, spare.queue);
  reuse(d.exchange, spare.exchange);
  reuse(d.routing_key, spare.routing_key);
  reuse(d.header_payload, spare.header_payload);
  spare_deliveries_.pop_back();
  return d;
}

void ChannelState::recycle(Delivery&& delivery) {
  if (spare_deliveries_.size() >= kSpareDeliveries ||
      delivery.header_payload.capacity() > kMaxSpareHeader) {
    return;
  }
  if (spare_deliveries_.capacity() == 0) spare_deliveries_.reserve(kSpareDeliveries);
  delivery.body.reset();
  delivery.body_hash.forget();
  spare_deliveries_.push_back(std::move(delivery));
}

void ChannelState::add_unacked(Delivery delivery) {
  std::uint64_t tag = delivery.client_tag;
  if (!spare_nodes_.empty() && !unacked_.contains(tag)) {
    auto node = std::move(spare_nodes_.back());
    spare_nodes_.pop_back();
    node.key() = tag;
    node.mapped() = make_record(std::move(delivery));
    unacked_.insert(unacked_.end(), std::move(node));
    return;
  }
  auto it = unacked_.find(tag);
  if (it != unacked_.end()) drop_record(it->second);
  unacked_.insert_or_assign(tag, make_record(std::move(delivery)));
}

void ChannelState::add_taken_over(Delivery delivery) {
  tags_.note_owned();
  delivery.taken_over = true;
  std::uint64_t tag = delivery.broker_tag;
  auto it = taken_over_.find(tag);
  if (it != taken_over_.end()) drop_record(it->second);
  taken_over_.insert_or_assign(tag, make_record(std::move(delivery)));
}

const Delivery* ChannelState::find_unacked(std::uint64_t client_tag) const {
  auto it = unacked_.find(client_tag);
  return it == unacked_.end() ? nullptr : &it->second.delivery;
}

Delivery* ChannelState::find_taken_over(std::uint64_t broker_tag) {
  auto it = taken_over_.find(broker_tag);
  return it == taken_over_.end() ? nullptr : &it->second.delivery;
}

std::vector<Delivery> ChannelState::take_settled(std::uint64_t client_tag, bool multiple) {
  std::vector<Delivery> taken;
  take_settled(client_tag, multiple, taken);
  return taken;
}

void ChannelState::take_settled(std::uint64_t client_tag, bool multiple,
                                std::vector<Delivery>& out) {
  // Moves the record at `it` to `out`; its node is kept for add_unacked while there is room.
  auto take = [&](std::map<std::uint64_t, Record>::iterator it) {
    if (spare_nodes_.size() >= kSpareDeliveries) {
      out.push_back(drop_record(it->second));
      unacked_.erase(it);
      return;
    }
    auto node = unacked_.extract(it);
    out.push_back(drop_record(node.mapped()));
    if (spare_nodes_.capacity() == 0) spare_nodes_.reserve(kSpareDeliveries);
    node.mapped() = Record{};  // nothing of it (its body above all) kept in the spare
    spare_nodes_.push_back(std::move(node));
  };
  if (!multiple) {
    auto it = unacked_.find(client_tag);
    if (it != unacked_.end()) take(it);
    return;
  }
  auto end = client_tag == 0 ? unacked_.end() : unacked_.upper_bound(client_tag);
  for (auto it = unacked_.begin(); it != end;) take(it++);
}

std::optional<Delivery> ChannelState::remove_taken_over(std::uint64_t broker_tag) {
  auto it = taken_over_.find(broker_tag);
  if (it == taken_over_.end()) return std::nullopt;
  Delivery d = drop_record(it->second);
  taken_over_.erase(it);
  return d;
}

bool ChannelState::unacked_at_or_below(std::uint64_t broker_tag) const {
  if (!tags_.reordered()) return false;  // broker tags then rise with client tags
  for (const auto& [tag, record] : unacked_) {
    if (record.delivery.broker_tag <= broker_tag) return true;
  }
  return false;
}

bool ChannelState::owned_at_or_below(std::uint64_t broker_tag) const {
  if (!taken_over_.empty() && taken_over_.begin()->first <= broker_tag) return true;
  for (const HeldBackDelivery& h : held_back) {
    if (h.delivery.broker_tag <= broker_tag) return true;
  }
  return false;
}

std::optional<std::uint64_t> ChannelState::broker_oldest_unsettled() const {
  const Delivery* oldest = nullptr;
  for (const auto& [tag, record] : unacked_) {
    if (!oldest || record.delivery.broker_tag < oldest->broker_tag) oldest = &record.delivery;
  }
  if (!oldest || is_slim(*oldest)) return std::nullopt;
  const std::uint64_t candidate = oldest->broker_tag;
  if (!taken_over_.empty() && taken_over_.begin()->first < candidate) return std::nullopt;
  for (const HeldBackDelivery& h : held_back) {
    if (h.delivery.broker_tag < candidate) return std::nullopt;
  }
  for (const ChannelTx::Settled& s : tx.settled) {
    if (s.delivery.broker_tag < candidate) return std::nullopt;
  }
  if (tags_.run_starts_below(candidate)) return std::nullopt;
  return candidate;
}

void ChannelState::tx_settle(Delivery delivery, SettleKind kind, bool requeue) {
  const std::uint64_t cost = record_cost(delivery);
  records_charge_.add(cost);
  tx.settled.push_back({std::move(delivery), kind, requeue, cost});
}

std::vector<ChannelTx::Settled> ChannelState::tx_take_settled() {
  std::vector<ChannelTx::Settled> taken = std::move(tx.settled);
  tx.settled.clear();
  for (ChannelTx::Settled& s : taken) {
    records_charge_.sub(s.cost);
    s.cost = 0;
  }
  return taken;
}

void ChannelState::stamp_handed_out(std::int64_t now_ms) {
  for (auto& [tag, record] : unacked_) {
    if (record.delivery.handed_out_ms < 0) record.delivery.handed_out_ms = now_ms;
  }
}

const Delivery* ChannelState::oldest_unacked() const {
  for (const auto& [tag, record] : unacked_) {
    if (!is_slim(record.delivery)) return &record.delivery;
  }
  return nullptr;
}

// A slim record was never shown to the observer: it is not reported as returned either.
std::vector<Delivery> ChannelState::take_unacked() {
  std::vector<Delivery> taken;
  taken.reserve(unacked_.size());
  for (auto& [tag, record] : unacked_) {
    Delivery d = drop_record(record);
    if (!is_slim(d)) taken.push_back(std::move(d));
  }
  unacked_.clear();
  return taken;
}

std::vector<Delivery> ChannelState::take_all() {
  std::vector<Delivery> taken = take_unacked();
  taken.reserve(taken.size() + taken_over_.size());
  for (auto& [tag, record] : taken_over_) taken.push_back(drop_record(record));
  taken_over_.clear();
  return taken;
}

std::vector<Delivery> ChannelState::requeued_by_broker(const std::string& consumer_tag) {
  std::vector<Delivery> requeued;
  for (auto& [client_tag, record] : unacked_) {
    Delivery& d = record.delivery;
    if (is_slim(d) || d.no_ack || d.consumer_tag != consumer_tag) continue;
    requeued.push_back(d);
    records_charge_.sub(record.cost);
    make_slim(d);
    record.cost = record_cost(d);
    records_charge_.add(record.cost);
  }
  std::sort(requeued.begin(), requeued.end(),
            [](const Delivery& a, const Delivery& b) { return a.broker_tag < b.broker_tag; });
  return requeued;
}

std::vector<std::uint64_t> ChannelState::in_hand_tags() const {
  std::vector<std::uint64_t> tags;
  for (const auto& [client_tag, record] : unacked_) {
    if (!is_slim(record.delivery) && !record.delivery.no_ack) tags.push_back(client_tag);
  }
  return tags;
}

}  // namespace nackguard::session
