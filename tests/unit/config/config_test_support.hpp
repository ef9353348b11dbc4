#pragma once

// A throw-away directory laid out like an install (conf/ beside policies/), so that file-based
// tests load real files and the default policies_dir "../policies" resolves.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <string_view>

#include "proxy/config/config.hpp"
#include "proxy/config/policy_loader.hpp"

namespace nackguard::config::testing {

class TempTree {
 public:
  TempTree() {
    std::random_device random;
    root_ = std::filesystem::temp_directory_path() /
            ("nackguard-config-test-" + std::to_string(random()));
    std::filesystem::create_directories(root_ / "conf");
    std::filesystem::create_directories(root_ / "policies");
  }
  ~TempTree() {
    std::error_code ignored;
    std::filesystem::remove_all(root_, ignored);
  }
  TempTree(const TempTree&) = delete;
  TempTree& operator=(const TempTree&) = delete;

  const std::filesystem::path& root() const { return root_; }

  // Writes conf/<name> and returns its path.
  std::filesystem::path write(std::string_view text, std::string_view name = "nackguard.yaml") {
    const std::filesystem::path path = root_ / "conf" / name;
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

 private:
  std::filesystem::path root_;
};

// The message of the ConfigError that `action` throws; a test failure if it throws nothing or
// anything else.
inline std::string config_error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const ConfigError& error) {
    return error.what();
  } catch (const std::exception& error) {
    ADD_FAILURE() << "expected ConfigError, got another exception: " << error.what();
    return {};
  }
  ADD_FAILURE() << "expected ConfigError, nothing was thrown";
  return {};
}

inline bool starts_with(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

// The ConfigError of loading `text` as the tree's config file, with the file's path replaced by
// "FILE".
inline std::string load_error(TempTree& tree, std::string_view text) {
  const std::filesystem::path file = tree.write(text);
  std::string message = config_error_of([&] { load_config(file); });
  const std::string path = file.string();
  if (starts_with(message, path)) message.replace(0, path.size(), "FILE");
  return message;
}

inline bool contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

// Runs a test from inside a directory (the tree), so that a file can be named relatively, as
// people do; the working directory comes back at the end of the scope.
class InDirectory {
 public:
  explicit InDirectory(const std::filesystem::path& directory)
      : previous_(std::filesystem::current_path()) {
    std::filesystem::current_path(directory);
  }
  ~InDirectory() { std::filesystem::current_path(previous_); }
  InDirectory(const InDirectory&) = delete;
  InDirectory& operator=(const InDirectory&) = delete;

 private:
  std::filesystem::path previous_;
};

// A test on config files in a fresh TempTree: load() loads `text` as conf/nackguard.yaml,
// error_for() returns its ConfigError (load_error).
class ConfigFileTest : public ::testing::Test {
 protected:
  Config load(std::string_view text) { return load_config(tree_.write(text)); }
  std::string error_for(std::string_view text) { return load_error(tree_, text); }

  TempTree tree_;
};

// A test on policy files in a fresh TempTree's policies directory: write() one, and
// error_for() loads `text` as p.yaml and returns load_policies' error with the directory's
// path taken out, so that expectations read "orders.yaml:3:5: ...".
class PolicyFileTest : public ::testing::Test {
 protected:
  std::filesystem::path dir() const { return tree_.root() / "policies"; }

  std::filesystem::path write(std::string_view name, std::string_view text) {
    const std::filesystem::path path = dir() / name;
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  // The ConfigError of loading the directory as it is, the directory's path taken out.
  std::string load_error() {
    std::string message = config_error_of([&] { load_policies(dir()); });
    const std::string prefix = dir().string() + "/";
    for (auto at = message.find(prefix); at != std::string::npos; at = message.find(prefix)) {
      message.erase(at, prefix.size());
    }
    return message;
  }

  std::string error_for(std::string_view text) {
    write("p.yaml", text);
    return load_error();
  }

  TempTree tree_;
};

}  // namespace nackguard::config::testing
