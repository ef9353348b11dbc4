#include "proxy/replay/report.hpp"

#include <algorithm>
#include <sstream>
#include <vector>

namespace nackguard::replay {

namespace {

void list_labels(std::ostream& out, const std::vector<std::string>& labels) {
  out << "  ids:";
  std::size_t shown = std::min(labels.size(), kMaxListed);
  for (std::size_t i = 0; i < shown; ++i) out << (i == 0 ? " " : ", ") << labels[i];
  if (labels.size() > shown) out << ", and " << labels.size() - shown << " more";
  out << "\n";
}

std::string joined(const std::vector<std::string>& parts, std::string_view separator) {
  std::string text;
  for (const std::string& part : parts) {
    if (!text.empty()) text.append(separator);
    text += part;
  }
  return text;
}

void group_line(std::ostream& out, const std::vector<std::string>& group, const GroupCounts& counts,
                bool dry_run) {
  out << "  " << joined(group, " / ") << ":";
  const char* separator = " ";
  auto part = [&](const char* what, std::uint64_t n, bool always) {
    if (n == 0 && !always) return;
    out << separator << what << " " << n;
    separator = ", ";
  };
  part(dry_run ? "would move" : "moved", counts.moved, true);
  part("at ceiling", counts.at_ceiling, false);
  part("failed", counts.failed, false);
  if (counts.first_return_s)
    out << separator << "first return " << iso_time(*counts.first_return_s);
  if (counts.last_return_s) out << ", last return " << iso_time(*counts.last_return_s);
  out << "\n";
}

}  // namespace

std::string render_summary(const Summary& summary, const RunInfo& info) {
  std::ostringstream out;
  out << "nackguard replay" << (summary.dry_run ? " --dry-run" : "") << ": " << info.from << " -> "
      << info.to << " on " << info.endpoint << ", vhost '" << info.vhost << "'"
      << (summary.dry_run ? " (dry run: nothing was moved)" : "") << "\n";
  out << "looked at: " << summary.looked_at << "\n";
  out << (summary.dry_run ? "would move: " : "moved: ") << summary.moved << "\n";
  out << "left at ceiling (x-nackguard-replays >= " << info.max_replays
      << "): " << summary.at_ceiling << "\n";
  if (!summary.ceiling_labels.empty()) list_labels(out, summary.ceiling_labels);
  if (!summary.dry_run) {
    out << "failed: " << summary.failed << "\n";
    std::size_t shown = std::min(summary.failures.size(), kMaxListed);
    for (std::size_t i = 0; i < shown; ++i) {
      out << "  " << summary.failures[i].label << ": " << summary.failures[i].why << "\n";
    }
    if (summary.failures.size() > shown) {
      out << "  and " << summary.failures.size() - shown << " more\n";
    }
  }
  if (summary.not_selected > 0) {
    out << "not selected (outside --where, --since or --until; left in " << info.from
        << "): " << summary.not_selected << "\n";
  }
  if (!summary.groups.empty()) {
    out << "by " << joined(summary.group_by, ", ") << ":\n";
    for (const auto& [group, counts] : summary.groups) {
      group_line(out, group, counts, summary.dry_run);
    }
  }
  if (summary.requeued > 0) {
    out << "left in " << info.from << " (requeued): " << summary.requeued << "\n";
  }
  if (summary.requeued_often > 0) {
    out << "warning: " << summary.requeued_often << " of them returned " << kReturnsWarning
        << " times or more (x-delivery-count up to " << summary.most_returns
        << "): on RabbitMQ 4.0 to 4.2 a quorum queue drops a message returned more often than "
           "its delivery limit (20 unless set), and each run that leaves a message returns it "
           "once; turn the limit off on "
        << info.from << " (docs/replay.md, \"Quorum DLQs\")\n";
  }
  if (summary.stop) out << "stopped: " << to_string(*summary.stop) << "\n";
  return out.str();
}

std::string render_progress(const Summary& summary, std::size_t bar_width) {
  const std::uint64_t total = summary.looked_at + summary.remaining;
  std::size_t filled =
      total == 0 ? bar_width : static_cast<std::size_t>(summary.looked_at * bar_width / total);
  std::ostringstream out;
  out << "[" << std::string(filled, '#') << std::string(bar_width - filled, '-') << "] "
      << summary.looked_at << "/" << total << "  " << (summary.dry_run ? "would move " : "moved ")
      << summary.moved << "  at ceiling " << summary.at_ceiling;
  if (!summary.dry_run) out << "  failed " << summary.failed;
  return out.str();
}

void ProgressBar::update(const Summary& summary) {
  if (!enabled_) return;
  auto now = now_();
  if (last_drawn_ && now - *last_drawn_ < std::chrono::milliseconds(100)) return;
  last_drawn_ = now;
  out_ << "\r\x1b[K" << render_progress(summary) << std::flush;
}

void ProgressBar::finish() {
  if (!enabled_ || !last_drawn_) return;
  out_ << "\r\x1b[K" << std::flush;
}

}  // namespace nackguard::replay
