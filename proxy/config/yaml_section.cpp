#include "proxy/config/yaml_section.hpp"

#include <yaml-cpp/depthguard.h>

#include <algorithm>

#include "proxy/config/config.hpp"
#include "proxy/config/suggest.hpp"

namespace nackguard::config::detail {

std::string Source::location(const YAML::Mark& mark) const {
  if (mark.is_null() || mark.line < 0 || mark.column < 0) return file_;
  return file_ + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1);
}

void Source::fail(const YAML::Mark& mark, std::string_view dotted_key,
                  std::string_view message) const {
  std::string text = location(mark) + ": ";
  if (!dotted_key.empty()) text.append(dotted_key).append(": ");
  text.append(message);
  throw ConfigError(text);
}

std::vector<YAML::Node> load_documents(const Source& source, std::string_view yaml_text,
                                       std::string_view syntax_hint) {
  try {
    return YAML::LoadAll(std::string(yaml_text));
  } catch (const YAML::DeepRecursion& error) {
    // yaml-cpp stops runaway nesting (an attack, or brackets never closed) with "bad file".
    source.fail(error.mark, "",
                "invalid YAML: nested deeper than " + std::to_string(error.depth()) +
                    " levels; nest less deeply, or close the brackets left open");
  } catch (const YAML::Exception& error) {
    source.fail(error.mark, "",
                "invalid YAML: " + error.msg +
                    "; fix the syntax at that spot (indent with spaces, not tabs; close every "
                    "bracket and quote" +
                    std::string(syntax_hint) + ")");
  }
}

std::string quote(std::string_view text) {
  constexpr std::size_t kLongest = 60;
  // Built by appending: GCC 12's -Wrestrict misfires on `"literal" + std::string` at -O2.
  std::string quoted = "\"";
  quoted.append(text.substr(0, kLongest));
  if (text.size() <= kLongest) return quoted.append("\"");
  return quoted.append("...\" (").append(std::to_string(text.size())).append(" characters)");
}

std::string describe_node(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      return "the scalar " + quote(node.Scalar());
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      break;
  }
  return "nothing";
}

YAML::Mark Field::value_mark() const {
  const YAML::Mark mark = value_.Mark();
  return value_.IsNull() || mark.is_null() ? key_.Mark() : mark;
}

void Field::fail(std::string_view message) const {
  source_->fail(value_mark(), dotted_key_, message);
}

std::string Field::scalar(std::string_view expected) const {
  if (!value_.IsScalar()) {
    fail("expected " + std::string(expected) + ", got " + describe_node(value_));
  }
  return value_.Scalar();
}

Section Section::top_level(const Source& source, const YAML::Node& document,
                           std::span<const std::string_view> known_keys) {
  return Section(source, "", document, document.Mark(), known_keys);
}

Section Section::child(std::string_view key, std::span<const std::string_view> known_keys) const {
  const Field* field = find(key);
  if (field == nullptr) return Section(*source_, dotted(key), YAML::Node(), {}, known_keys);
  return Section(*source_, field->dotted_key(), field->value(), field->value_mark(), known_keys);
}

const Field* Section::find(std::string_view key) const {
  const std::string wanted = dotted(key);
  const auto it = std::find_if(fields_.begin(), fields_.end(),
                               [&](const Field& field) { return field.dotted_key() == wanted; });
  return it == fields_.end() ? nullptr : &*it;
}

Section::Section(const Source& source, std::string dotted_name, const YAML::Node& node,
                 const YAML::Mark& mark, std::span<const std::string_view> known_keys)
    : source_(&source), dotted_name_(std::move(dotted_name)) {
  if (!node.IsDefined() || node.IsNull()) return;
  check_is_map(node, mark, known_keys);
  for (const auto& entry : node) add_field(entry.first, entry.second, known_keys);
}

void Section::check_is_map(const YAML::Node& node, const YAML::Mark& mark,
                           std::span<const std::string_view> known_keys) const {
  if (node.IsMap()) return;
  const std::string got = ", got " + describe_node(node);
  if (dotted_name_.empty()) {
    source_->fail(
        mark, "",
        "expected a map of settings (" + join(known_keys) + ") at the top level of the file" + got);
  }
  source_->fail(mark, dotted_name_,
                "expected a map with the keys " + join(known_keys) + got +
                    "; write it as \"key: value\" lines indented under " + dotted_name_ +
                    ", or as {key: value, ...}");
}

void Section::add_field(const YAML::Node& key, const YAML::Node& value,
                        std::span<const std::string_view> known_keys) {
  if (!key.IsScalar()) {
    source_->fail(key.Mark(), dotted_name_, "expected a key name, got " + describe_node(key));
  }
  const std::string& name = key.Scalar();
  if (std::find(known_keys.begin(), known_keys.end(), name) == known_keys.end()) {
    std::string message = "unknown key \"" + dotted(name) + "\"";
    if (const auto suggestion = closest_match(name, known_keys)) {
      message += " (did you mean \"" + *suggestion + "\"?)";
    }
    source_->fail(key.Mark(), "", message + "; valid keys here: " + join(known_keys));
  }
  if (const Field* earlier = find(name)) {
    const YAML::Mark first = earlier->key_mark();
    source_->fail(key.Mark(), "",
                  "duplicate key \"" + dotted(name) + "\" (first set at line " +
                      std::to_string(first.line + 1) + "); keep only one of them");
  }
  fields_.emplace_back(*source_, dotted(name), key, value);
}

std::string Section::dotted(std::string_view key) const {
  if (dotted_name_.empty()) return std::string(key);
  return dotted_name_ + "." + std::string(key);
}

}  // namespace nackguard::config::detail
