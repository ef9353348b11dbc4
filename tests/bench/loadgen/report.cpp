#include "loadgen/report.hpp"

#include <algorithm>
#include <cstdio>
#include <string_view>

namespace nackguard::bench {

namespace {

double percentile_us(const std::vector<std::int64_t>& sorted, double p) {
  if (sorted.empty()) return 0;
  std::size_t rank = static_cast<std::size_t>(p * static_cast<double>(sorted.size() - 1) + 0.5);
  return static_cast<double>(sorted[std::min(rank, sorted.size() - 1)]) / 1e3;
}

double per_second(std::uint64_t count, double seconds) {
  return seconds > 0 ? static_cast<double>(count) / seconds : 0;
}

double gib(const Options& options) {
  return static_cast<double>(options.messages) * static_cast<double>(options.size) /
         (1024.0 * 1024.0 * 1024.0);
}

std::string fixed(double value, int decimals) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
          out += escaped;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string_view mode_name(Mode mode) {
  return mode == Mode::sequential ? "sequential" : "concurrent";
}

std::string latency_text(const LatencySummary& s) {
  return "p50 " + fixed(s.p50_us, 0) + " us  p99 " + fixed(s.p99_us, 0) + " us  p99.9 " +
         fixed(s.p999_us, 0) + " us  max " + fixed(s.max_us, 0) + " us";
}

std::string latency_json(const LatencySummary& s) {
  return "\"count\":" + std::to_string(s.count) + ",\"p50\":" + fixed(s.p50_us, 1) +
         ",\"p99\":" + fixed(s.p99_us, 1) + ",\"p999\":" + fixed(s.p999_us, 1) +
         ",\"max\":" + fixed(s.max_us, 1);
}

// "127.0.0.1:5672", or with --targets "127.0.0.1 direct:5672 nackguard:5673".
std::string destination(const Options& o) {
  if (o.targets.empty()) return o.host + ":" + std::to_string(o.port);
  std::string text = o.host;
  for (const Target& t : o.targets) text += " " + t.label + ":" + std::to_string(t.port);
  return text;
}

}  // namespace

LatencySummary summarize_latency(std::vector<std::int64_t>& latencies_ns) {
  LatencySummary s;
  std::sort(latencies_ns.begin(), latencies_ns.end());
  s.count = latencies_ns.size();
  s.p50_us = percentile_us(latencies_ns, 0.50);
  s.p99_us = percentile_us(latencies_ns, 0.99);
  s.p999_us = percentile_us(latencies_ns, 0.999);
  s.max_us = latencies_ns.empty() ? 0 : static_cast<double>(latencies_ns.back()) / 1e3;
  return s;
}

void print_table(std::ostream& out, const Options& o, const RunResult& r) {
  const double mib = static_cast<double>(o.size) / (1024.0 * 1024.0);
  out << "nackguard-bench " << (o.label.empty() ? "" : o.label + " ") << destination(o) << "  "
      << mode_name(o.mode) << ", " << o.messages << " x " << o.size << " B, " << o.connections
      << " conn, prefetch " << o.prefetch << ", ack every " << o.ack_every << ", confirm window "
      << o.confirm_window << ", nack " << o.nack_fraction
      << (o.rate > 0 ? ", rate " + fixed(o.rate, 0) + "/s" : "") << '\n';
  out << "  publish  " << fixed(per_second(o.messages, r.publish_s), 0) << " msg/s  "
      << fixed(per_second(o.messages, r.publish_s) * mib, 1) << " MiB/s  " << fixed(r.publish_s, 3)
      << " s\n";
  out << "  consume  " << fixed(per_second(o.messages, r.consume_s), 0) << " msg/s  "
      << fixed(per_second(o.messages, r.consume_s) * mib, 1) << " MiB/s  " << fixed(r.consume_s, 3)
      << " s  (" << r.deliveries << " deliveries, " << r.nacked << " nacked, " << r.redelivered
      << " redelivered)\n";
  out << "  latency  " << latency_text(r.latency) << "  (" << r.latency.count << " first deliveries"
      << (o.mode == Mode::sequential ? ", queueing included" : "") << ")\n";
  std::size_t width = 0;
  for (const TargetLatency& t : r.latency_by_target) width = std::max(width, t.label.size());
  for (const TargetLatency& t : r.latency_by_target) {
    out << "    " << t.label << std::string(width - t.label.size() + 2, ' ')
        << latency_text(t.latency) << "  (" << t.latency.count << ")\n";
  }
  for (const PidReport& p : r.pids) {
    out << "  pid " << p.pid << " (" << p.name << ")  ";
    if (!p.ok) {
      out << "not readable\n";
      continue;
    }
    out << "cpu " << fixed(p.cpu_s, 2) << " s (user " << fixed(p.user_cpu_s, 2) << ")";
    if (o.mode == Mode::sequential) {
      out << " (publish " << fixed(p.cpu_publish_s, 2) << ", consume " << fixed(p.cpu_consume_s, 2)
          << ")";
    }
    out << " = " << fixed(p.cpu_s / static_cast<double>(o.messages) * 1e5, 3) << " s/100k msgs, "
        << fixed(p.cpu_s / gib(o), 3) << " s/GiB;  rss " << fixed(p.rss_start_kb / 1024.0, 1)
        << " -> " << fixed(p.rss_end_kb / 1024.0, 1) << " MiB, peak "
        << fixed(p.peak_rss_kb / 1024.0, 1) << " MiB" << (p.peak_reset ? "" : " (since start)")
        << '\n';
  }
  out << "  load generator cpu " << fixed(r.self_cpu_s, 2) << " s;  load average "
      << fixed(r.load_start, 2) << " -> " << fixed(r.load_end, 2) << '\n';
  if (!r.ok) out << "  FAILED: " << r.error << '\n';
}

void print_json(std::ostream& out, const Options& o, const RunResult& r) {
  out << "{\"bench\":\"nackguard-bench\",\"label\":" << json_string(o.label)
      << ",\"host\":" << json_string(o.host) << ",\"port\":" << o.port << ",\"mode\":\""
      << mode_name(o.mode) << "\",\"messages\":" << o.messages << ",\"size\":" << o.size
      << ",\"connections\":" << o.connections << ",\"prefetch\":" << o.prefetch
      << ",\"ack_every\":" << o.ack_every << ",\"confirm_window\":" << o.confirm_window
      << ",\"nack_fraction\":" << o.nack_fraction << ",\"rate\":" << o.rate
      << ",\"ok\":" << (r.ok ? "true" : "false") << ",\"error\":" << json_string(r.error)
      << ",\"publish\":{\"seconds\":" << fixed(r.publish_s, 6)
      << ",\"msg_per_s\":" << fixed(per_second(o.messages, r.publish_s), 1)
      << ",\"published\":" << r.published << ",\"confirmed\":" << r.confirmed
      << ",\"broker_nacks\":" << r.broker_nacks
      << "},\"consume\":{\"seconds\":" << fixed(r.consume_s, 6)
      << ",\"msg_per_s\":" << fixed(per_second(o.messages, r.consume_s), 1)
      << ",\"deliveries\":" << r.deliveries << ",\"acked\":" << r.acked
      << ",\"nacked\":" << r.nacked << ",\"redelivered\":" << r.redelivered
      << ",\"duplicates\":" << r.duplicates << ",\"missing\":" << r.missing << "},\"latency_us\":{"
      << latency_json(r.latency)
      << ",\"queueing_included\":" << (o.mode == Mode::sequential ? "true" : "false")
      << "},\"latency_by_target\":{";
  for (std::size_t i = 0; i < r.latency_by_target.size(); ++i) {
    const TargetLatency& t = r.latency_by_target[i];
    out << (i ? "," : "") << json_string(t.label) << ":{" << latency_json(t.latency) << "}";
  }
  out << "},\"pids\":[";
  for (std::size_t i = 0; i < r.pids.size(); ++i) {
    const PidReport& p = r.pids[i];
    out << (i ? "," : "") << "{\"pid\":" << p.pid << ",\"name\":" << json_string(p.name)
        << ",\"ok\":" << (p.ok ? "true" : "false") << ",\"cpu_s\":" << fixed(p.cpu_s, 3)
        << ",\"cpu_publish_s\":" << fixed(p.cpu_publish_s, 3)
        << ",\"cpu_consume_s\":" << fixed(p.cpu_consume_s, 3)
        << ",\"user_cpu_s\":" << fixed(p.user_cpu_s, 3)
        << ",\"cpu_s_per_100k\":" << fixed(p.cpu_s / static_cast<double>(o.messages) * 1e5, 4)
        << ",\"cpu_s_per_gib\":" << fixed(p.cpu_s / gib(o), 4)
        << ",\"rss_before_connect_kb\":" << p.rss_before_connect_kb
        << ",\"rss_start_kb\":" << p.rss_start_kb << ",\"rss_end_kb\":" << p.rss_end_kb
        << ",\"peak_rss_kb\":" << p.peak_rss_kb
        << ",\"peak_reset\":" << (p.peak_reset ? "true" : "false") << "}";
  }
  out << "],\"self_cpu_s\":" << fixed(r.self_cpu_s, 3)
      << ",\"load_start\":" << fixed(r.load_start, 2) << ",\"load_end\":" << fixed(r.load_end, 2)
      << "}\n";
}

}  // namespace nackguard::bench
