#pragma once
// spdlog set-up: text for people, or JSON lines for log collectors.

#include <string>

namespace nackguard {

// `level` is trace|debug|info|warn|error|critical|off; `format` is text|json. Both are
// validated by the config loader.
void setup_logging(const std::string& level, const std::string& format);

}  // namespace nackguard
