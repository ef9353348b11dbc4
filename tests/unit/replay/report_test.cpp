// The summary and the progress line, as exact text.
#include "proxy/replay/report.hpp"

#include <gtest/gtest.h>

#include <sstream>

namespace nackguard::replay {
namespace {

using namespace std::chrono_literals;

const RunInfo kInfo{"orders.dlq", "orders", "rabbit:5672", "/", 3};

// A summary of `looked_at` messages, of which `moved` moved (or would) and `at_ceiling` were
// left at the ceiling.
Summary counted(std::uint64_t looked_at, std::uint64_t moved, std::uint64_t at_ceiling) {
  Summary s;
  s.looked_at = looked_at;
  s.moved = moved;
  s.at_ceiling = at_ceiling;
  return s;
}

TEST(RenderSummary, ARunWithEveryOutcome) {
  Summary s = counted(10, 7, 2);
  s.failed = 1;
  s.requeued = 3;
  s.group_by = {"reason"};
  s.groups[{"max_redeliveries"}] = {5, 2, 1, 1714564800, 1714651200};
  s.groups[{"crash_loop"}] = {2, 0, 0, std::nullopt, std::nullopt};
  s.ceiling_labels = {"m-1", "m-2"};
  s.failures = {{"m-9", "the broker returned the copy: 312 NO_ROUTE"}};
  s.stop = StopReason::queue_empty;
  EXPECT_EQ(render_summary(s, kInfo),
            "nackguard replay: orders.dlq -> orders on rabbit:5672, vhost '/'\n"
            "looked at: 10\n"
            "moved: 7\n"
            "left at ceiling (x-nackguard-replays >= 3): 2\n"
            "  ids: m-1, m-2\n"
            "failed: 1\n"
            "  m-9: the broker returned the copy: 312 NO_ROUTE\n"
            "by reason:\n"
            "  crash_loop: moved 2\n"
            "  max_redeliveries: moved 5, at ceiling 2, failed 1, first return "
            "2024-05-01T12:00:00Z, last return 2024-05-02T12:00:00Z\n"
            "left in orders.dlq (requeued): 3\n"
            "stopped: the queue is empty\n");
}

// A dry run that looked at `n` messages, would move them all, and gave them back to the queue.
Summary dry_run_moving_all(std::uint64_t n) {
  Summary s = counted(n, n, 0);
  s.dry_run = true;
  s.requeued = n;
  return s;
}

TEST(RenderSummary, ADryRunSaysNothingMoved) {
  Summary s = dry_run_moving_all(4);
  s.group_by = {"reason"};
  s.groups[{"max_redeliveries"}] = {4, 0, 0, std::nullopt, std::nullopt};
  s.stop = StopReason::queue_empty;
  EXPECT_EQ(render_summary(s, kInfo),
            "nackguard replay --dry-run: orders.dlq -> orders on rabbit:5672, vhost '/' (dry run: "
            "nothing was moved)\n"
            "looked at: 4\n"
            "would move: 4\n"
            "left at ceiling (x-nackguard-replays >= 3): 0\n"
            "by reason:\n"
            "  max_redeliveries: would move 4\n"
            "left in orders.dlq (requeued): 4\n"
            "stopped: the queue is empty\n");
}

TEST(RenderSummary, WarnsOfRequeuedMessagesReturnedOften) {
  Summary s = dry_run_moving_all(2);
  s.requeued_often = 1;
  s.most_returns = 17;
  const std::string text = render_summary(s, kInfo);
  EXPECT_NE(text.find("left in orders.dlq (requeued): 2\n"
                      "warning: 1 of them returned 10 times or more (x-delivery-count up to 17): "
                      "on RabbitMQ 4.0 to 4.2 a quorum queue drops a message returned more often "
                      "than its delivery limit (20 unless set), and each run that leaves a "
                      "message returns it once; turn the limit off on orders.dlq (docs/replay.md, "
                      "\"Quorum DLQs\")\n"),
            std::string::npos)
      << text;
  s.requeued_often = 0;
  EXPECT_EQ(render_summary(s, kInfo).find("warning"), std::string::npos);
}

TEST(RenderSummary, LongListsAreCut) {
  Summary s;
  for (std::size_t i = 0; i < kMaxListed + 5; ++i) s.ceiling_labels.push_back("m");
  std::string text = render_summary(s, kInfo);
  EXPECT_NE(text.find(", and 5 more\n"), std::string::npos);
}

TEST(RenderSummary, ABrokenOffRunHasNoStopLine) {
  EXPECT_EQ(render_summary(Summary{}, kInfo).find("stopped:"), std::string::npos);
}

TEST(RenderProgress, DrawsABarOverWhatWasQueued) {
  Summary s = counted(50, 48, 2);
  s.remaining = 50;
  EXPECT_EQ(render_progress(s, 10), "[#####-----] 50/100  moved 48  at ceiling 2  failed 0");
  s.dry_run = true;
  EXPECT_EQ(render_progress(s, 10), "[#####-----] 50/100  would move 48  at ceiling 2");
  s.remaining = 0;  // the last one: the bar is full
  EXPECT_EQ(render_progress(s, 4).substr(0, 6), "[####]");
}

TEST(ProgressBar, DisabledWritesNothing) {
  std::ostringstream out;
  ProgressBar bar(out, false);
  bar.update(Summary{});
  bar.finish();
  EXPECT_EQ(out.str(), "");
}

TEST(ProgressBar, RedrawsAtMostTenTimesASecondAndErasesItself) {
  std::ostringstream out;
  auto now = std::chrono::steady_clock::time_point{};
  ProgressBar bar(out, true, [&now] { return now; });
  Summary s;
  bar.update(s);
  now += 50ms;
  bar.update(s);
  std::string once = out.str();
  EXPECT_EQ(once, "\r\x1b[K" + render_progress(s));
  now += 60ms;
  bar.update(s);
  EXPECT_EQ(out.str(), once + once);
  bar.finish();
  EXPECT_EQ(out.str(), once + once + "\r\x1b[K");
}

}  // namespace
}  // namespace nackguard::replay
