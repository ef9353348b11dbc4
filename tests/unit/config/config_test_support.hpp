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

}  // namespace nackguard::config::testing
