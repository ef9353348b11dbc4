// watch_rules: inotify records parsed from bytes, what each event means for the reload, and
// the debounce that merges a burst of changes into one reload.

#include "proxy/net/watch_rules.hpp"

#include <gtest/gtest.h>
#include <sys/inotify.h>

#include <cstring>

namespace nackguard::net {
namespace {

using Clock = ReloadDebounce::Clock;
using Kind = EventMeaning::Kind;
using std::chrono::milliseconds;

// One record as the kernel writes it: the header, then the name padded with NULs to `len`.
void append_record(std::vector<std::byte>& out, int wd, std::uint32_t mask, const std::string& name,
                   std::uint32_t padded_len) {
  inotify_event header{};
  header.wd = wd;
  header.mask = mask;
  header.len = padded_len;
  const std::size_t at = out.size();
  out.resize(at + sizeof header + padded_len);
  std::memcpy(out.data() + at, &header, sizeof header);
  std::memcpy(out.data() + at + sizeof header, name.data(), name.size());
}

TEST(ParseInotifyEvents, ReadsEveryRecordWithItsPaddedName) {
  std::vector<std::byte> bytes;
  append_record(bytes, 1, IN_MOVED_TO, "..data", 16);
  append_record(bytes, 2, IN_CLOSE_WRITE, "orders.yaml", 16);
  append_record(bytes, -1, IN_Q_OVERFLOW, "", 0);
  const std::vector<InotifyEvent> events = parse_inotify_events(bytes);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].wd, 1);
  EXPECT_EQ(events[0].mask, static_cast<std::uint32_t>(IN_MOVED_TO));
  EXPECT_EQ(events[0].name, "..data");
  EXPECT_EQ(events[1].name, "orders.yaml");
  EXPECT_EQ(events[2].wd, -1);
  EXPECT_EQ(events[2].name, "");
}

TEST(ParseInotifyEvents, ANameFillingItsWholeLengthHasNoNul) {
  std::vector<std::byte> bytes;
  append_record(bytes, 3, IN_CREATE, "abcdefgh", 8);
  const std::vector<InotifyEvent> events = parse_inotify_events(bytes);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].name, "abcdefgh");
}

TEST(ParseInotifyEvents, ARecordCutShortIsDropped) {
  std::vector<std::byte> bytes;
  append_record(bytes, 1, IN_CLOSE_WRITE, "a.yaml", 16);
  append_record(bytes, 2, IN_CLOSE_WRITE, "b.yaml", 16);
  for (std::size_t cut : {std::size_t{1}, std::size_t{10}, std::size_t{16 + 1}}) {
    std::vector<std::byte> shorter(bytes.begin(), bytes.end() - static_cast<long>(cut));
    const std::vector<InotifyEvent> events = parse_inotify_events(shorter);
    ASSERT_EQ(events.size(), 1u) << "cut " << cut;
    EXPECT_EQ(events[0].name, "a.yaml");
  }
  EXPECT_TRUE(parse_inotify_events({}).empty());
}

struct MeaningCase {
  const char* what;
  WatchedDir dir;
  std::uint32_t mask;
  const char* name;
  Kind kind;
};

const WatchedDir kConfigDir{"/etc/nackguard", "nackguard.yaml", false};
const WatchedDir kPolicies{"/etc/nackguard/policies", "", true};
const WatchedDir kBoth{"/etc/nackguard", "nackguard.yaml", true};

// Short names that keep each case on one line.
constexpr Kind kChanged = Kind::changed;
constexpr Kind kIgnore = Kind::ignore;
constexpr Kind kGone = Kind::watch_gone;
constexpr std::uint32_t kDirCreated = IN_CREATE | IN_ISDIR;
constexpr std::uint32_t kDirDeleted = IN_DELETE | IN_ISDIR;

const MeaningCase kCases[] = {
    {"config written in place", kConfigDir, IN_CLOSE_WRITE, "nackguard.yaml", kChanged},
    {"config renamed over", kConfigDir, IN_MOVED_TO, "nackguard.yaml", kChanged},
    {"config removed", kConfigDir, IN_DELETE, "nackguard.yaml", kChanged},
    {"config's temporary file", kConfigDir, IN_CLOSE_WRITE, "nackguard.yaml.tmp", kIgnore},
    {"another file beside the config", kConfigDir, IN_CLOSE_WRITE, "other.yaml", kIgnore},
    {"ConfigMap swap in the config dir", kConfigDir, IN_MOVED_TO, "..data", kChanged},
    {"ConfigMap's temporary link", kConfigDir, IN_CREATE, "..data_tmp", kIgnore},
    {"ConfigMap's temporary link renamed", kConfigDir, IN_MOVED_FROM, "..data_tmp", kIgnore},
    {"ConfigMap's new version", kConfigDir, kDirCreated, "..2026_12_03_10_00_00.1", kIgnore},
    {"ConfigMap's old version removed", kPolicies, kDirDeleted, "..2026_12_03_10_00_00.1", kIgnore},
    {"ConfigMap swap in policies_dir", kPolicies, IN_MOVED_TO, "..data", kChanged},
    {"policy written in place", kPolicies, IN_CLOSE_WRITE, "orders.yaml", kChanged},
    {"policy renamed over", kPolicies, IN_MOVED_TO, "orders.yml", kChanged},
    {"policy link created", kPolicies, IN_CREATE, "orders.yaml", kChanged},
    {"policy removed", kPolicies, IN_DELETE, "orders.yaml", kChanged},
    {"policy renamed away", kPolicies, IN_MOVED_FROM, "orders.yaml", kChanged},
    {"editor's swap file", kPolicies, IN_CLOSE_WRITE, ".orders.yaml.swp", kIgnore},
    {"editor's backup", kPolicies, IN_CLOSE_WRITE, "orders.yaml~", kIgnore},
    {"not a policy file", kPolicies, IN_CLOSE_WRITE, "README.md", kIgnore},
    {"a directory named like a policy", kPolicies, kDirCreated, "examples.yaml", kIgnore},
    {"config's name in policies_dir only", kPolicies, IN_CLOSE_WRITE, "nackguard.yaml", kChanged},
    {"a policy in the config dir alone", kConfigDir, IN_CLOSE_WRITE, "orders.yaml", kIgnore},
    {"a policy where both are one dir", kBoth, IN_CLOSE_WRITE, "orders.yaml", kChanged},
    {"the config where both are one dir", kBoth, IN_MOVED_TO, "nackguard.yaml", kChanged},
    {"the directory removed", kPolicies, IN_IGNORED, "", kGone},
};

class InterpretTest : public ::testing::TestWithParam<MeaningCase> {};

TEST_P(InterpretTest, SaysWhetherToReload) {
  const MeaningCase& c = GetParam();
  const EventMeaning meaning = interpret(InotifyEvent{7, c.mask, c.name}, &c.dir);
  EXPECT_EQ(meaning.kind, c.kind) << c.what;
  if (c.kind == Kind::changed) {
    EXPECT_EQ(meaning.path, c.dir.path / c.name) << c.what;
  }
  if (c.kind == Kind::watch_gone) {
    EXPECT_EQ(meaning.path, c.dir.path) << c.what;
  }
}

INSTANTIATE_TEST_SUITE_P(Events, InterpretTest, ::testing::ValuesIn(kCases));

TEST(Interpret, OverflowMeansReloadWhateverTheWatch) {
  EXPECT_EQ(interpret(InotifyEvent{-1, IN_Q_OVERFLOW, ""}, nullptr).kind, Kind::overflow);
}

TEST(Interpret, AWatchNoLongerKnownIsIgnored) {
  // The IN_IGNORED that follows nackguard's own inotify_rm_watch, or a late event for it.
  EXPECT_EQ(interpret(InotifyEvent{3, IN_IGNORED, ""}, nullptr).kind, Kind::ignore);
  EXPECT_EQ(interpret(InotifyEvent{3, IN_MOVED_TO, "..data"}, nullptr).kind, Kind::ignore);
}

TEST(WatchMask, CoversWritesRenamesCreationsAndRemovals) {
  const std::uint32_t mask = watch_mask();
  for (std::uint32_t bit : {IN_CLOSE_WRITE, IN_MOVED_TO, IN_MOVED_FROM, IN_CREATE, IN_DELETE}) {
    EXPECT_NE(mask & bit, 0u) << bit;
  }
  EXPECT_EQ(mask & IN_MODIFY, 0u) << "every write of a file being written would count";
}

class DebounceTest : public ::testing::Test {
 protected:
  Clock::time_point at(int ms) const { return start_ + milliseconds(ms); }
  ReloadDebounce debounce_{milliseconds(300), milliseconds(1000)};
  Clock::time_point start_{std::chrono::seconds(1000)};
};

TEST_F(DebounceTest, NothingPendingNothingDue) {
  EXPECT_EQ(debounce_.deadline(), std::nullopt);
  EXPECT_EQ(debounce_.take_due(at(5000)), std::nullopt);
}

TEST_F(DebounceTest, OneChangeIsDueAfterTheQuietTime) {
  debounce_.note("/p/a.yaml", at(0));
  EXPECT_EQ(debounce_.deadline(), at(300));
  EXPECT_EQ(debounce_.take_due(at(299)), std::nullopt);
  EXPECT_EQ(debounce_.take_due(at(300)), "/p/a.yaml");
  EXPECT_EQ(debounce_.deadline(), std::nullopt);
  EXPECT_EQ(debounce_.take_due(at(900)), std::nullopt) << "taken once";
}

TEST_F(DebounceTest, ABurstIsOneReloadNamingTheFirstPathAndCountingTheRest) {
  debounce_.note("/m/..data", at(0));
  debounce_.note("/m/policies/a.yaml", at(5));
  debounce_.note("/m/..data", at(10));
  debounce_.note("/m/policies/b.yaml", at(200));
  EXPECT_EQ(debounce_.deadline(), at(500));
  EXPECT_EQ(debounce_.take_due(at(499)), std::nullopt);
  EXPECT_EQ(debounce_.take_due(at(500)), "/m/..data (and 2 more)");
}

TEST_F(DebounceTest, AStreamOfChangesIsDueAtTheLongestWait) {
  for (int ms = 0; ms <= 1500; ms += 100) {
    debounce_.note("/p/a.yaml", at(ms));
    if (ms < 1000) {
      EXPECT_EQ(debounce_.take_due(at(ms)), std::nullopt) << ms;
    }
  }
  EXPECT_EQ(debounce_.deadline(), at(1000));
  EXPECT_EQ(debounce_.take_due(at(1500)), "/p/a.yaml");
}

TEST_F(DebounceTest, AChangeAfterTheReloadStartsAFreshWait) {
  debounce_.note("/p/a.yaml", at(0));
  ASSERT_EQ(debounce_.take_due(at(300)), "/p/a.yaml");
  debounce_.note("/p/b.yaml", at(2000));
  EXPECT_EQ(debounce_.deadline(), at(2300));
  EXPECT_EQ(debounce_.take_due(at(2300)), "/p/b.yaml");
}

}  // namespace
}  // namespace nackguard::net
