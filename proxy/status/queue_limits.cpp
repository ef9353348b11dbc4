#include "proxy/status/queue_limits.hpp"

#include <boost/json/object.hpp>

#include "proxy/status/status_json.hpp"

namespace nackguard::status {

namespace json = boost::json;

std::vector<QueueLimitRow> management_rows(const std::vector<retry::LearntLimitRow>& rows,
                                           std::int64_t steady_now, std::int64_t wall_now) {
  std::vector<QueueLimitRow> out;
  out.reserve(rows.size());
  for (const retry::LearntLimitRow& row : rows) {
    const retry::LearntLimit& learnt = row.limit;
    QueueLimitRow limit;
    limit.vhost = row.key.vhost;
    limit.queue = row.key.queue;
    limit.type = retry::to_string(learnt.queue.type);
    limit.limit = learnt.queue.limit;
    limit.source = retry::to_string(learnt.queue.source);
    limit.learnt_from = "management_api";
    limit.state = retry::to_string(learnt.state);
    if (learnt.fetched_ms > 0) limit.learnt_wall_ms = wall_now - (steady_now - learnt.fetched_ms);
    limit.error = row.failure;
    out.push_back(std::move(limit));
  }
  return out;
}

json::array queue_limits_json(const std::vector<QueueLimitRow>& rows) {
  json::array out;
  for (const QueueLimitRow& row : rows) {
    json::object item;
    item["vhost"] = row.vhost;
    item["queue"] = row.queue;
    item["type"] = row.type;
    item["limit"] = row.limit ? json::value(*row.limit) : json::value(nullptr);
    item["source"] = row.source;
    item["learnt_from"] = row.learnt_from;
    item["state"] = row.state;
    item["learnt_at"] =
        row.learnt_wall_ms ? json::value(iso_time_ms(*row.learnt_wall_ms)) : json::value(nullptr);
    item["error"] = row.error.empty() ? json::value(nullptr) : json::value(row.error);
    out.push_back(std::move(item));
  }
  return out;
}

}  // namespace nackguard::status
