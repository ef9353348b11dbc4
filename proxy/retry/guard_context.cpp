#include "proxy/retry/guard_context.hpp"

namespace nackguard::retry {

namespace {

template <typename Clock>
std::int64_t clock_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch())
      .count();
}

GuardClocks complete(GuardClocks clocks) {
  if (!clocks.steady) clocks.steady = clock_ms<std::chrono::steady_clock>;
  if (!clocks.wall) clocks.wall = clock_ms<std::chrono::system_clock>;
  return clocks;
}

}  // namespace

GuardContext::GuardContext(const GuardSettings& settings, std::shared_ptr<const PolicySet> policies,
                           GuardListener* listener, GuardClocks clocks)
    : settings_(settings),
      policies_(policies ? std::move(policies) : std::make_shared<PolicySet>()),
      listener_(listener ? listener : &null_listener_),
      clocks_(complete(std::move(clocks))),
      tracker_(settings.tracker_max_entries, settings.tracker_idle_ttl),
      // The message hashes outage detection keeps are bounded like the tracker's entries.
      health_(10000, settings.tracker_max_entries),
      queue_facts_(settings.max_queue_facts),
      learnt_limits_({settings.max_learnt_limits, settings.learnt_limits_refresh}),
      budget_(settings.retained_body_bytes) {}

std::shared_ptr<const PolicySet> GuardContext::policies() const {
  std::lock_guard lock(mutex_);
  return policies_;
}

void GuardContext::mark_copies_failing(const std::string& queue, std::int64_t until_ms) {
  std::lock_guard lock(mutex_);
  constexpr std::size_t kMaxFailingQueues = 10000;
  if (failing_until_.size() >= kMaxFailingQueues) {
    std::int64_t now = clocks_.steady();
    std::erase_if(failing_until_, [now](const auto& item) { return item.second <= now; });
    if (failing_until_.size() >= kMaxFailingQueues) return;
  }
  failing_until_[queue] = until_ms;
}

bool GuardContext::copies_failing(const std::string& queue, std::int64_t now_ms) const {
  std::lock_guard lock(mutex_);
  auto it = failing_until_.find(queue);
  return it != failing_until_.end() && now_ms < it->second;
}

void GuardContext::notice_once(std::string_view key, std::string_view queue,
                               std::string_view what) {
  {
    std::lock_guard lock(mutex_);
    constexpr std::size_t kMaxNotices = 10000;
    if (noticed_.size() >= kMaxNotices) noticed_.clear();  // then each may be told once more
    if (!noticed_.emplace(key).second) return;
  }
  listener_->on_notice(queue, what);
}

void GuardContext::set_policies(std::shared_ptr<const PolicySet> policies) {
  {
    std::lock_guard lock(mutex_);
    policies_ = std::move(policies);
  }
  version_.fetch_add(1, std::memory_order_acq_rel);
}

}  // namespace nackguard::retry
