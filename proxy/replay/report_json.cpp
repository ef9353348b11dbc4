// render_json (report.hpp), on Boost.JSON (built by proxy/json/boost_json.cpp).

#include <boost/json.hpp>

#include "proxy/replay/report.hpp"

namespace nackguard::replay {

namespace json = boost::json;

namespace {

json::value time_or_null(const std::optional<std::int64_t>& seconds) {
  if (!seconds) return nullptr;
  return json::string(iso_time(*seconds));
}

json::array groups_of(const Summary& summary) {
  json::array groups;
  for (const auto& [values, counts] : summary.groups) {
    json::object key;
    for (std::size_t i = 0; i < values.size() && i < summary.group_by.size(); ++i) {
      key[summary.group_by[i]] = values[i];
    }
    json::object group;
    group["key"] = std::move(key);
    group["moved"] = counts.moved;
    group["at_ceiling"] = counts.at_ceiling;
    group["failed"] = counts.failed;
    group["first_return"] = time_or_null(counts.first_return_s);
    group["last_return"] = time_or_null(counts.last_return_s);
    groups.push_back(std::move(group));
  }
  return groups;
}

}  // namespace

std::string render_json(const Summary& summary, const RunInfo& info) {
  json::object doc;
  doc["from"] = info.from;
  doc["to"] = info.to;
  doc["endpoint"] = info.endpoint;
  doc["vhost"] = info.vhost;
  doc["dry_run"] = summary.dry_run;
  doc["max_replays"] = info.max_replays;
  doc["looked_at"] = summary.looked_at;
  doc["moved"] = summary.moved;
  doc["at_ceiling"] = summary.at_ceiling;
  doc["failed"] = summary.failed;
  doc["not_selected"] = summary.not_selected;
  doc["requeued"] = summary.requeued;
  doc["requeued_often_returned"] = summary.requeued_often;
  doc["most_returns"] = summary.most_returns;
  json::array group_by;
  for (const std::string& name : summary.group_by) group_by.emplace_back(name);
  doc["group_by"] = std::move(group_by);
  doc["groups"] = groups_of(summary);
  json::array ceiling;
  for (const std::string& label : summary.ceiling_labels) ceiling.emplace_back(label);
  doc["ceiling_ids"] = std::move(ceiling);
  json::array failures;
  for (const Failed& failed : summary.failures) {
    failures.push_back(json::object{{"id", failed.label}, {"why", failed.why}});
  }
  doc["failures"] = std::move(failures);
  if (summary.stop) {
    doc["stopped"] = std::string(to_string(*summary.stop));
  } else {
    doc["stopped"] = nullptr;
  }
  return json::serialize(doc) + "\n";
}

}  // namespace nackguard::replay
