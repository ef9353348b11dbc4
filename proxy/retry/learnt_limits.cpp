#include "proxy/retry/learnt_limits.hpp"

#include <algorithm>

namespace nackguard::retry {

namespace {

using KeyView = std::pair<std::string_view, std::string_view>;

// Failure kinds remembered per queue for the once-per-kind log line.
constexpr std::size_t kMaxFailureKinds = 8;

}  // namespace

std::string_view to_string(LookupState state) {
  switch (state) {
    case LookupState::unknown:
      return "unknown";
    case LookupState::pending:
      return "pending";
    case LookupState::known:
      return "known";
    case LookupState::not_found:
      return "not_found";
    case LookupState::failed:
      return "failed";
  }
  return "unknown";
}

std::size_t LearntLimits::KeyHash::operator()(const KeyView& key) const {
  const std::size_t vhost = std::hash<std::string_view>()(key.first);
  return vhost ^ (std::hash<std::string_view>()(key.second) + 0x9e3779b97f4a7c15ULL + (vhost << 6) +
                  (vhost >> 2));
}

LearntLimits::LearntLimits(LearntLimitsSettings settings)
    : settings_([&] {
        settings.retry_failed = std::min(settings.retry_failed, settings.refresh);
        return settings;
      }()) {}

LearntLimits::Entry* LearntLimits::find(const QueueKey& key) {
  auto it = entries_.find(KeyView(key.vhost, key.queue));
  return it == entries_.end() ? nullptr : &it->second;
}

LearntLimits::Entry& LearntLimits::insert(std::string_view vhost, std::string_view queue) {
  while (!order_.empty() && entries_.size() >= settings_.max_queues) {
    entries_.erase(order_.front());
    order_.pop_front();
    ++forgotten_;
  }
  order_.emplace_back(vhost, queue);
  return entries_[order_.back()];
}

bool LearntLimits::due(const Entry& entry, std::int64_t now_ms) const {
  // A fetch that never reported back (it cannot, short of a bug) is asked for again.
  if (entry.in_flight) return now_ms - entry.requested_ms > settings_.refresh.count();
  return now_ms >= entry.next_due_ms;
}

void LearntLimits::drop_stale_wishes() {
  std::erase_if(wanted_, [this](const auto& key) {
    auto it = entries_.find(KeyView(key.first, key.second));
    return it == entries_.end() || !it->second.wanted;
  });
}

LearntLimit LearntLimits::lookup(std::string_view vhost, std::string_view queue,
                                 std::int64_t now_ms) {
  if (!enabled() || settings_.max_queues == 0) return {};
  const std::lock_guard lock(mutex_);
  auto it = entries_.find(KeyView(vhost, queue));
  Entry& entry = it != entries_.end() ? it->second : insert(vhost, queue);
  if (!entry.wanted && due(entry, now_ms)) {
    entry.wanted = true;
    if (entry.limit.state == LookupState::unknown) entry.limit.state = LookupState::pending;
    wanted_.emplace_back(vhost, queue);
    // Wishes of forgotten queues stay until taken; never more than the entries twice over.
    if (wanted_.size() > 2 * settings_.max_queues) drop_stale_wishes();
  }
  return entry.limit;
}

std::vector<QueueKey> LearntLimits::take_wanted(std::size_t max, std::int64_t now_ms) {
  std::vector<QueueKey> out;
  const std::lock_guard lock(mutex_);
  // A queue asked of that has no answer yet (no statistics, a failure, a 404) is asked again
  // once due, whether or not a lookup asks again: the guard asks once per refresh interval.
  for (auto& [key, entry] : entries_) {
    if (entry.wanted || entry.in_flight || entry.knows_limit) continue;
    if (entry.limit.state == LookupState::unknown || !due(entry, now_ms)) continue;
    entry.wanted = true;
    wanted_.emplace_back(key.first, key.second);
  }
  while (out.size() < max && !wanted_.empty()) {
    auto key = std::move(wanted_.front());
    wanted_.pop_front();
    auto it = entries_.find(KeyView(key.first, key.second));
    if (it == entries_.end() || !it->second.wanted) continue;
    it->second.wanted = false;
    it->second.in_flight = true;
    it->second.requested_ms = now_ms;
    out.push_back(QueueKey{std::move(key.first), std::move(key.second)});
  }
  return out;
}

void LearntLimits::settle(Entry& entry, std::int64_t now_ms, std::chrono::milliseconds after) {
  entry.in_flight = false;
  entry.next_due_ms = now_ms + after.count();
}

RecordChange LearntLimits::answer(const QueueKey& key, LookupState state, const QueueLimit& limit,
                                  std::int64_t now_ms) {
  const std::lock_guard lock(mutex_);
  Entry* entry = find(key);
  if (entry == nullptr) return {};
  RecordChange change;
  change.recovered = !entry->failure_kinds.empty();
  change.changed =
      state == LookupState::known && (!entry->knows_limit || entry->limit.queue != limit);
  entry->knows_limit = state == LookupState::known;
  entry->failure_kinds.clear();
  entry->failure.clear();
  entry->limit = LearntLimit{state, limit, now_ms};
  settle(*entry, now_ms, settings_.refresh);
  return change;
}

RecordChange LearntLimits::record(const QueueKey& key, const QueueLimit& limit,
                                  std::int64_t now_ms) {
  return answer(key, LookupState::known, limit, now_ms);
}

RecordChange LearntLimits::record_not_found(const QueueKey& key, std::int64_t now_ms) {
  return answer(key, LookupState::not_found, QueueLimit{}, now_ms);
}

void LearntLimits::record_retry(const QueueKey& key, std::int64_t now_ms) {
  const std::lock_guard lock(mutex_);
  if (Entry* entry = find(key)) settle(*entry, now_ms, settings_.retry_failed);
}

RecordChange LearntLimits::record_failure(const QueueKey& key, std::string_view kind,
                                          std::string what, std::int64_t now_ms) {
  const std::lock_guard lock(mutex_);
  Entry* entry = find(key);
  if (entry == nullptr) return {};
  RecordChange change;
  std::vector<std::string>& kinds = entry->failure_kinds;
  if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end() &&
      kinds.size() < kMaxFailureKinds) {
    kinds.emplace_back(kind);
    change.failure_is_new = true;
  }
  entry->failure = std::move(what);
  entry->limit.state = LookupState::failed;  // the last answer's limit, if any, stays
  settle(*entry, now_ms, settings_.retry_failed);
  return change;
}

std::vector<LearntLimitRow> LearntLimits::rows(std::size_t max) const {
  std::vector<LearntLimitRow> out;
  const std::lock_guard lock(mutex_);
  for (const auto& key : order_) {
    if (out.size() >= max) break;
    const Entry& entry = entries_.find(key)->second;
    out.push_back(LearntLimitRow{QueueKey{key.first, key.second}, entry.limit, entry.failure});
  }
  return out;
}

std::size_t LearntLimits::size() const {
  const std::lock_guard lock(mutex_);
  return entries_.size();
}

std::size_t LearntLimits::known() const {
  const std::lock_guard lock(mutex_);
  return static_cast<std::size_t>(
      std::count_if(entries_.begin(), entries_.end(),
                    [](const auto& e) { return e.second.limit.state == LookupState::known; }));
}

std::uint64_t LearntLimits::forgotten() const {
  const std::lock_guard lock(mutex_);
  return forgotten_;
}

std::optional<LimitInForce> in_force(const LearntLimit& learnt) {
  if (learnt.fetched_ms == 0) return std::nullopt;
  if (learnt.state != LookupState::known && learnt.state != LookupState::failed)
    return std::nullopt;
  if (learnt.queue.type == QueueFacts::Type::classic) {
    return LimitInForce{std::nullopt, LimitInForce::Source::classic};
  }
  return LimitInForce{learnt.queue.limit, LimitInForce::Source::management};
}

}  // namespace nackguard::retry
