#pragma once
// Pieces of the Prometheus text exposition format 0.0.4: escaping and number formatting.
// https://prometheus.io/docs/instrumenting/exposition_formats/

#include <cstdint>
#include <string>
#include <string_view>

namespace nackguard::metrics {

inline constexpr std::string_view kTextContentType = "text/plain; version=0.0.4; charset=utf-8";

// Appends a label value escaped for the text format: backslash, double quote and newline are
// escaped, and bytes that are not valid UTF-8 become U+FFFD (a scraper rejects the whole page
// over one bad byte, and AMQP queue names are arbitrary bytes).
void append_label_value(std::string& out, std::string_view value);
// Appends a HELP text escaped for the text format: backslash and newline.
void append_help(std::string& out, std::string_view help);

void append_value(std::string& out, std::uint64_t value);
void append_value(std::string& out, std::int64_t value);
// Shortest form that reads back exactly; integers print without a fraction ("3", not "3.0"),
// and NaN and the infinities as "NaN", "+Inf", "-Inf".
void append_value(std::string& out, double value);

}  // namespace nackguard::metrics
