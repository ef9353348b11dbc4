// render_text() (status_cli.hpp): /status.json as aligned tables.

#include <boost/json.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "proxy/status/status_cli.hpp"

namespace nackguard::status {

namespace json = boost::json;

namespace {

// Names come from clients: a control character (an escape sequence included) is written as
// \xNN, so that a queue name cannot rewrite the terminal.
std::string printable(std::string_view text) {
  std::string out;
  for (char c : text) {
    auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", byte);
      out += hex;
    } else {
      out += c;
    }
  }
  return out;
}

std::string text(const json::value& value) {
  if (value.is_string()) return printable(value.as_string());
  if (value.is_null()) return "";
  if (value.is_bool()) return value.as_bool() ? "yes" : "no";
  if (value.is_double()) {
    char out[32];
    std::snprintf(out, sizeof out, "%.2f", value.as_double());
    return out;
  }
  return json::serialize(value);
}

const json::value& at(const json::value& object, std::string_view key) {
  static const json::value null;
  if (!object.is_object()) return null;
  const json::value* found = object.as_object().if_contains(key);
  return found != nullptr ? *found : null;
}

// Rows of cells, the first the heading, as columns two spaces apart.
std::string table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()));
    for (std::size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - row[i].size() + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

std::string time_of(const json::value& value) {
  std::string t = text(value);
  if (t.size() >= 19) t = t.substr(0, 10) + " " + t.substr(11, 8);
  return t;
}

std::string next_of(const json::value& next) {
  if (!next.is_object()) return "";
  std::string out = text(at(next, "action"));
  if (out == "delay") out += " " + text(at(next, "delay_ms")) + " ms";
  if (!at(next, "reason").is_null()) out += " (" + text(at(next, "reason")) + ")";
  if (text(at(next, "when")) == "next_delivery") out += " at next delivery";
  return out;
}

std::string dead_letters_of(const json::value& reasons) {
  std::string out;
  if (!reasons.is_object()) return "0";
  for (const auto& [reason, n] : reasons.as_object()) {
    if (n.is_number() && n.to_number<double>() == 0) continue;
    if (!out.empty()) out += ", ";
    out += std::string(reason) + " " + text(n);
  }
  return out.empty() ? "0" : out;
}

std::string header(const json::value& s) {
  const json::value& n = at(s, "nackguard");
  const json::value& c = at(s, "config");
  const json::value& l = at(s, "limits");
  const json::value& reload = at(c, "last_reload");
  std::string out = "nackguard " + text(at(n, "version")) + " on " + text(at(n, "host")) +
                    ", started " + time_of(at(n, "started_at")) + ", now " + time_of(at(n, "now")) +
                    "\n";
  out += "config: " + text(at(c, "file")) + "; " + text(at(c, "policies")) + " policies from " +
         text(at(c, "policies_dir")) + "; last reload: ";
  out += reload.is_object()
             ? time_of(at(reload, "at")) + " " + text(at(reload, "result")) +
                   (text(at(reload, "message")).empty() ? "" : ": " + text(at(reload, "message")))
             : "none since start";
  out += "\nlimits: tracker " + text(at(l, "tracker_entries")) + " of " +
         text(at(l, "tracker_max_entries")) + " entries (" + text(at(l, "tracker_evictions")) +
         " evicted); retained bodies " + text(at(l, "retained_body_bytes")) + " of " +
         text(at(l, "retained_body_bytes_limit")) + " bytes; " + text(at(l, "client_connections")) +
         " client connections\n";
  return out;
}

// The broker's delivery limit per queue, when nackguard knows any.
std::string limits_table(const json::value& limits) {
  if (!limits.is_array() || limits.as_array().empty()) return "";
  std::vector<std::vector<std::string>> rows{
      {"VHOST", "QUEUE", "TYPE", "LIMIT", "SOURCE", "LEARNT FROM", "STATE", "ERROR"}};
  for (const json::value& q : limits.as_array()) {
    rows.push_back({text(at(q, "vhost")), text(at(q, "queue")), text(at(q, "type")),
                    at(q, "limit").is_null() ? "none" : text(at(q, "limit")), text(at(q, "source")),
                    text(at(q, "learnt_from")), text(at(q, "state")), text(at(q, "error"))});
  }
  return "\nDELIVERY LIMITS (the broker's, per queue)\n" + table(rows);
}

}  // namespace

std::string render_text(const json::value& s) {
  std::string out = header(s);
  std::vector<std::vector<std::string>> queues{{"QUEUE", "DELIVERIES", "RETURNS", "REQUEUED",
                                                "DELAYED", "REPUBLISHED", "DEAD-LETTERED",
                                                "FALLBACKS", "OUTAGE"}};
  if (at(s, "queues").is_array()) {
    for (const json::value& q : at(s, "queues").as_array()) {
      const json::value& w = at(q, "window").is_object() ? at(q, "window") : at(q, "total");
      const json::value& became = at(w, "returns_became");
      std::string outage = text(at(q, "outage"));
      if (!at(q, "outage_ratio").is_null()) outage += " (" + text(at(q, "outage_ratio")) + ")";
      queues.push_back({text(at(q, "queue")), text(at(w, "deliveries")), text(at(w, "returns")),
                        text(at(became, "forwarded")), text(at(became, "delayed")),
                        text(at(became, "republished")), dead_letters_of(at(w, "dead_letters")),
                        text(at(w, "fallbacks")), outage});
    }
  }
  out += "\nQUEUES (last " + text(at(s, "window_seconds")) + " s)\n" + table(queues);
  out += limits_table(at(s, "queue_limits"));
  std::vector<std::vector<std::string>> top{
      {"QUEUE", "MESSAGE", "RETURNS", "DELIVERIES", "FIRST RETURN", "LAST RETURN", "NEXT"}};
  if (at(s, "top").is_array()) {
    for (const json::value& m : at(s, "top").as_array()) {
      const json::value& identity = at(m, "identity");
      top.push_back({at(m, "queue").is_null() ? "(forgotten)" : text(at(m, "queue")),
                     identity.is_string() ? text(identity) : "#" + text(at(m, "id")),
                     text(at(m, "returns")), text(at(m, "deliveries")),
                     time_of(at(m, "first_return")), time_of(at(m, "last_return")),
                     next_of(at(m, "next"))});
    }
  }
  out += "\nTOP MESSAGES (by returns)\n" + table(top);
  return out;
}

}  // namespace nackguard::status
