#include "proxy/config/policy_identity.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <optional>
#include <string>

#include "proxy/config/suggest.hpp"
#include "proxy/config/yaml_values.hpp"

namespace nackguard::config::detail {
namespace {

using retry::IdentitySource;

constexpr std::array<std::string_view, 3> kIdentityWords{"message_id", "correlation_id", "body"};
constexpr std::string_view kHeaderPrefix = "header:";

// The source a person most likely meant by `text`: a near miss of a word, or of the "header:"
// prefix ("headers:id" suggests "header:id").
std::optional<std::string> suggest_identity(const std::string& text) {
  if (auto word = closest_match(text, kIdentityWords)) return word;
  const auto colon = text.find(':');
  constexpr std::array<std::string_view, 1> kHeader{"header"};
  if (colon != std::string::npos && closest_match(text.substr(0, colon), kHeader)) {
    std::string suggestion(kHeaderPrefix);
    return suggestion.append(text.substr(colon + 1));
  }
  return std::nullopt;
}

IdentitySource read_identity_item(const Field& item) {
  constexpr std::string_view kExpected = "one of message_id, correlation_id, body, header:<name>";
  const YAML::Node& value = item.value();
  if (value.IsMap() && value.size() == 1 && value.begin()->first.Scalar() == "header") {
    item.fail(std::string("expected ").append(kExpected) +
              ", got a map; write header:<name> as one word, without a space after the colon "
              "(YAML reads \"header: id\" as a map)");
  }
  const std::string text = item.scalar(kExpected);
  if (text == "message_id") return {IdentitySource::Kind::message_id, ""};
  if (text == "correlation_id") return {IdentitySource::Kind::correlation_id, ""};
  if (text == "body") return {IdentitySource::Kind::body, ""};
  if (text.starts_with(kHeaderPrefix)) {
    const std::string name = text.substr(kHeaderPrefix.size());
    if (name.empty()) item.fail("header: needs the header's name after the colon, e.g. header:id");
    if (name.front() == ' ' || name.front() == '\t') {
      item.fail(
          "remove the space after header: (the name starts right after the colon, e.g. "
          "header:id)");
    }
    check_name_length(item, name, "header names");
    return {IdentitySource::Kind::header, name};
  }
  std::string message = std::string("expected ").append(kExpected) + ", got " + quote(text);
  if (const auto suggestion = suggest_identity(text)) {
    message += " (did you mean \"" + *suggestion + "\"?)";
  }
  item.fail(message);
}

}  // namespace

std::vector<IdentitySource> read_identity(const Source& source, const Field& field) {
  const YAML::Node& list = field.value();
  if (!list.IsSequence()) {
    field.fail("expected a list such as [message_id, header:id, correlation_id, body], got " +
               detail::describe_node(list));
  }
  if (list.size() == 0) {
    field.fail("the list is empty; name at least one source, such as [message_id, body]");
  }
  std::vector<IdentitySource> sources;
  for (const YAML::Node& node : list) {
    // The list stands in for the key: an empty item is then located at the list.
    const Field item(source, field.dotted_key(), list, node);
    IdentitySource identity = read_identity_item(item);
    if (std::find(sources.begin(), sources.end(), identity) != sources.end()) {
      item.fail(quote(node.Scalar()) + " is listed twice; list each source once");
    }
    sources.push_back(std::move(identity));
  }
  return sources;
}

}  // namespace nackguard::config::detail
