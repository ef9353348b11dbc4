// ConfigWatcher on real inotify in a temporary directory: a Kubernetes ConfigMap update (the
// ..data link swapped) is one reload, the policies are watched where the path leads after it,
// a file renamed over the config is seen, and a directory that cannot be watched only warns.

#include "proxy/net/config_watcher.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <boost/asio/io_context.hpp>
#include <fstream>
#include <vector>

namespace nackguard::net {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

void write(const fs::path& file, const std::string& text) {
  std::ofstream(file) << text;
}

class ConfigWatcherTest : public ::testing::Test {
 protected:
  ConfigWatcherTest() {
    std::string pattern = (fs::temp_directory_path() / "nackguard-watch-XXXXXX").string();
    root_ = mkdtemp(pattern.data());
    mount_ = root_ / "mount";
    fs::create_directories(mount_);
  }
  ~ConfigWatcherTest() override {
    std::error_code ignored;
    fs::remove_all(root_, ignored);
  }

  // A ConfigMap volume's version: a ..<name> directory with the config and one policy.
  void add_version(const std::string& name, const std::string& policy) {
    fs::create_directories(mount_ / name / "policies");
    write(mount_ / name / "nackguard.yaml", "threads: 1\n");
    write(mount_ / name / "policies" / "a.yaml", policy);
  }
  // As kubelet does: the first version with its links, or a swap of ..data and the old gone.
  void mount_first(const std::string& name) {
    add_version(name, "max_redeliveries: 1\n");
    fs::create_directory_symlink(name, mount_ / "..data");
    fs::create_symlink("..data/nackguard.yaml", mount_ / "nackguard.yaml");
    fs::create_directory_symlink("..data/policies", mount_ / "policies");
  }
  void swap_to(const std::string& name, const std::string& old) {
    add_version(name, "max_redeliveries: 2\n");
    fs::create_directory_symlink(name, mount_ / "..data_tmp");
    fs::rename(mount_ / "..data_tmp", mount_ / "..data");
    fs::remove_all(mount_ / old);
  }

  void start(const fs::path& config_file, const fs::path& policies_dir) {
    watcher_ =
        std::make_unique<ConfigWatcher>(io_.get_executor(), [=, this](const std::string& what) {
          reloads_.push_back(what);
          watcher_->follow(policies_dir);  // as App::reload does
        });
    watcher_->start(config_file, policies_dir);
  }
  // Runs the io_context until `count` reloads happened, then 600 ms more for any extra one.
  void run_until_reloads(std::size_t count) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    while (reloads_.size() < count && std::chrono::steady_clock::now() < deadline) {
      io_.run_for(milliseconds(20));
    }
    io_.run_for(milliseconds(600));
  }

  fs::path root_;
  fs::path mount_;
  boost::asio::io_context io_;
  std::unique_ptr<ConfigWatcher> watcher_;
  std::vector<std::string> reloads_;
};

TEST_F(ConfigWatcherTest, AConfigMapUpdateIsOneReloadAndThePoliciesAreFollowed) {
  mount_first("..v1");
  start(mount_ / "nackguard.yaml", mount_ / "policies");
  io_.run_for(milliseconds(50));
  swap_to("..v2", "..v1");
  run_until_reloads(1);
  ASSERT_EQ(reloads_.size(), 1u) << "the swap and the old version's removal are one reload";
  EXPECT_EQ(reloads_[0].rfind((mount_ / "..data").string(), 0), 0u) << reloads_[0];

  // The policies path now leads into ..v2: a write there is seen.
  write(mount_ / "policies" / "a.yaml", "max_redeliveries: 3\n");
  run_until_reloads(2);
  ASSERT_EQ(reloads_.size(), 2u);
  EXPECT_EQ(reloads_[1], (mount_ / "policies" / "a.yaml").string());

  swap_to("..v3", "..v2");
  run_until_reloads(3);
  EXPECT_EQ(reloads_.size(), 3u);
}

TEST_F(ConfigWatcherTest, FilesOtherThanTheConfigAndPoliciesAreIgnored) {
  fs::create_directories(root_ / "policies");
  write(root_ / "nackguard.yaml", "threads: 1\n");
  start(root_ / "nackguard.yaml", root_ / "policies");
  write(root_ / "notes.txt", "x");
  write(root_ / "policies" / ".a.yaml.swp", "x");
  fs::create_directory(root_ / "policies" / "examples");
  run_until_reloads(0);
  EXPECT_TRUE(reloads_.empty()) << reloads_.front();
}

TEST_F(ConfigWatcherTest, AConfigRenamedOverIsSeenAndAMissingPoliciesDirOnlyWarns) {
  write(root_ / "nackguard.yaml", "threads: 1\n");
  start(root_ / "nackguard.yaml", root_ / "no-such-dir");
  write(root_ / "nackguard.yaml.tmp", "threads: 2\n");
  fs::rename(root_ / "nackguard.yaml.tmp", root_ / "nackguard.yaml");
  run_until_reloads(1);
  ASSERT_EQ(reloads_.size(), 1u);
  EXPECT_EQ(reloads_[0], (root_ / "nackguard.yaml").string());
}

TEST_F(ConfigWatcherTest, NoReloadAfterCancel) {
  fs::create_directories(root_ / "policies");
  start(root_ / "nackguard.yaml", root_ / "policies");
  write(root_ / "policies" / "a.yaml", "max_redeliveries: 1\n");
  io_.run_for(milliseconds(50));
  watcher_->cancel();
  run_until_reloads(0);
  EXPECT_TRUE(reloads_.empty());
}

}  // namespace
}  // namespace nackguard::net
