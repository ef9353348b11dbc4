#pragma once

// Walking a parsed YAML document with every complaint located at file:line:column and named by
// its full dotted key. Shared by the config loader and, later, the policy loader; the only
// place besides them that sees yaml-cpp.

#include <yaml-cpp/yaml.h>

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace nackguard::config::detail {

// The file being read, named as the person gave it so that messages match what they typed.
class Source {
 public:
  explicit Source(std::string file) : file_(std::move(file)) {}

  const std::string& file() const { return file_; }

  // "file:line:column" (1-based), or just "file" when yaml-cpp has no position.
  std::string location(const YAML::Mark& mark) const;

  // Throws ConfigError "file:line:column: key: message"; the key part is left out when empty.
  [[noreturn]] void fail(const YAML::Mark& mark, std::string_view dotted_key,
                         std::string_view message) const;

 private:
  std::string file_;
};

// The YAML documents in `yaml_text`; invalid YAML (runaway nesting included) is a located
// ConfigError that says how to fix it, with `syntax_hint` added to the advice on syntax.
std::vector<YAML::Node> load_documents(const Source& source, std::string_view yaml_text,
                                       std::string_view syntax_hint = "");

// `text` in double quotes for a message; a long value is cut short so that the message still
// fits on a screen.
std::string quote(std::string_view text);

// How a value that is not what was expected reads in a message: "the scalar \"x\"", "a map",
// "a list", "nothing".
std::string describe_node(const YAML::Node& node);

// One `key: value` entry of a map, with what is needed to complain about it.
class Field {
 public:
  Field(const Source& source, std::string dotted_key, YAML::Node key, YAML::Node value)
      : source_(&source), dotted_key_(std::move(dotted_key)), key_(key), value_(value) {}

  const std::string& dotted_key() const { return dotted_key_; }
  const YAML::Node& value() const { return value_; }
  YAML::Mark key_mark() const { return key_.Mark(); }
  // Where the value starts, or the key when the value is empty: yaml-cpp places an empty
  // value on the following line, which would point the reader at the wrong setting.
  YAML::Mark value_mark() const;

  [[noreturn]] void fail(std::string_view message) const;

  // The value's text; fails with "expected <expected>, got ..." when it is a map, a list or
  // empty.
  std::string scalar(std::string_view expected) const;

 private:
  const Source* source_;
  std::string dotted_key_;
  YAML::Node key_;
  YAML::Node value_;
};

// A YAML map whose keys have been checked against the known ones: an unknown key (with a "did
// you mean"), a duplicate, a non-map value all fail on construction, so a typo never silently
// falls back to a default.
class Section {
 public:
  // The top level of a document; an empty document is an empty section.
  static Section top_level(const Source& source, const YAML::Node& document,
                           std::span<const std::string_view> known_keys);

  // The map under `key`; an absent or empty value is an empty section, so that defaults apply.
  Section child(std::string_view key, std::span<const std::string_view> known_keys) const;

  // nullptr when the key is absent.
  const Field* find(std::string_view key) const;

 private:
  Section(const Source& source, std::string dotted_name, const YAML::Node& node,
          const YAML::Mark& mark, std::span<const std::string_view> known_keys);

  void check_is_map(const YAML::Node& node, const YAML::Mark& mark,
                    std::span<const std::string_view> known_keys) const;
  void add_field(const YAML::Node& key, const YAML::Node& value,
                 std::span<const std::string_view> known_keys);
  std::string dotted(std::string_view key) const;

  const Source* source_;
  std::string dotted_name_;  // empty at the top level
  std::vector<Field> fields_;
};

}  // namespace nackguard::config::detail
