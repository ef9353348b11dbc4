#pragma once

// The per-queue retry policies: one YAML file per policy in the policies directory, every key
// checked as strictly as nackguard.yaml's, with errors naming file:line:column and the dotted
// key. See policies/README.md for the format.

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "proxy/config/config.hpp"
#include "proxy/retry/policy.hpp"
#include "proxy/retry/policy_set.hpp"

namespace nackguard::config {

// Loads every *.yaml and *.yml file directly in `dir`, in name order, one policy each;
// subdirectories (such as examples/) and hidden files are ignored. A directory without policy
// files gives the built-in default alone. Two files naming the same queue (or the same glob)
// is an error naming both. Throws ConfigError.
retry::PolicySet load_policies(const std::filesystem::path& dir);

// Whether load_policies reads a file of this name (a name, not a path): *.yaml or *.yml, not
// hidden.
bool is_policy_file_name(const std::filesystem::path& name);

// One policy file's text, as load_policies reads each. `file` names it in messages and becomes
// Policy::source. Throws ConfigError.
retry::Policy parse_policy(std::string_view yaml_text, const std::filesystem::path& file);

// The effective policies for --check-config, in the order they are tried: one block per
// policy, headed by its source file, with its settings as indented `key: value` lines; the
// built-in default closes the list when no file claims "*".
std::string describe_policies(const retry::PolicySet& policies);

// What --check-config warns about in the policies (and nackguard logs when it loads them), one
// line each ("warning: <source>: <key>: ..."): an old key name that still works (the loader's
// Policy::warnings, which name file:line:column), and a max_redeliveries at or past the
// delivery limit the policy's broker_delivery_limit names.
std::vector<std::string> policy_warnings(const retry::PolicySet& policies);
// What --check-config adds about the policies, not worth a warning at every start: a policy
// without ack_timeout leaves a hung consumer unbounded on RabbitMQ 4.3's classic queues.
std::vector<std::string> policy_notes(const retry::PolicySet& policies);

}  // namespace nackguard::config
