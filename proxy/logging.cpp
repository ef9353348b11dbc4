#include "proxy/logging.hpp"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <memory>
#include <string_view>

namespace nackguard {

namespace {

// The length of the well-formed UTF-8 sequence at the start of `text`, or 0.
std::size_t utf8_sequence_length(std::string_view text) {
  auto at = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  unsigned char lead = at(0);
  std::size_t n = lead >= 0xF0 && lead <= 0xF4 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC2 ? 2 : 0;
  if (n == 0 || text.size() < n) return 0;
  for (std::size_t i = 1; i < n; ++i) {
    if ((at(i) & 0xC0) != 0x80) return 0;
  }
  // Overlong forms, surrogates and code points past U+10FFFF.
  if (lead == 0xE0 && at(1) < 0xA0) return 0;
  if (lead == 0xED && at(1) > 0x9F) return 0;
  if (lead == 0xF0 && at(1) < 0x90) return 0;
  if (lead == 0xF4 && at(1) > 0x8F) return 0;
  return n;
}

// Writes the message as a JSON string body: quotes, backslashes and control bytes escaped.
class JsonEscapedMessage : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    static constexpr char kHex[] = "0123456789abcdef";
    static constexpr std::string_view kReplacement = "\\ufffd";
    std::string_view text(msg.payload.data(), msg.payload.size());
    for (std::size_t i = 0; i < text.size();) {
      auto byte = static_cast<unsigned char>(text[i]);
      if (byte == '"' || byte == '\\') {
        dest.push_back('\\');
        dest.push_back(static_cast<char>(byte));
        ++i;
      } else if (byte < 0x20 || byte == 0x7f) {
        const char escaped[] = {'\\', 'u', '0', '0', kHex[byte >> 4], kHex[byte & 15]};
        dest.append(escaped, escaped + sizeof escaped);
        ++i;
      } else if (byte < 0x80) {
        dest.push_back(static_cast<char>(byte));
        ++i;
      } else if (std::size_t n = utf8_sequence_length(text.substr(i)); n > 0) {
        dest.append(text.data() + i, text.data() + i + n);
        i += n;
      } else {
        // Not UTF-8 (a message id in Latin-1, say): JSON must be, so the byte is replaced.
        dest.append(kReplacement.data(), kReplacement.data() + kReplacement.size());
        ++i;
      }
    }
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonEscapedMessage>();
  }
};

}  // namespace

void setup_logging(const std::string& level, const std::string& format) {
  auto logger = std::make_shared<spdlog::logger>("nackguard",
                                                 std::make_shared<spdlog::sinks::stderr_sink_mt>());
  if (format == "json") {
    auto formatter = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
    formatter->add_flag<JsonEscapedMessage>('*').set_pattern(
        R"({"time":"%Y-%m-%dT%H:%M:%S.%fZ","level":"%l","msg":"%*"})");
    logger->set_formatter(std::move(formatter));
  } else {
    logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  }
  logger->set_level(spdlog::level::from_str(level));
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(std::move(logger));
}

}  // namespace nackguard
