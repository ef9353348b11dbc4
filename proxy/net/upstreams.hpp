#pragma once
// The broker addresses one nackguard connects to (upstream.addresses, or upstream.host/port),
// shared by the server and every relay: which address a new connection tries first
// (AddressPicker), and what the readiness probes last found. No sockets here.

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "proxy/config/config.hpp"
#include "proxy/net/address_picker.hpp"

namespace nackguard::net {

struct UpstreamAddress {
  std::string host;  // a host name or an IP address, without brackets
  std::uint16_t port = 5672;
  std::string name;  // "host:port" as in the config: log lines and the metrics' address label
};

class Upstreams {
 public:
  // At least one address. `config_key` is where they were set ("upstream.addresses" or
  // "upstream.host"), for messages that say what to check.
  explicit Upstreams(const std::vector<config::Endpoint>& addresses,
                     std::string config_key = "upstream.host",
                     AddressPicker::Now now = &AddressPicker::Clock::now);

  const std::string& config_key() const { return config_key_; }
  const std::vector<UpstreamAddress>& addresses() const { return addresses_; }
  std::vector<std::string> names() const;
  AddressPicker& picker() { return picker_; }

  // The result of the latest readiness probe of `index`: nullopt when it accepted a TCP
  // connection, else why not. A failed probe makes the picker skip the address, a good one
  // ends the skip.
  void probed(std::size_t index, std::optional<std::string> problem);
  // nullopt while at least one address accepted its latest probe; otherwise every address's
  // problem, "; "-separated (an address not probed yet counts as unreachable).
  std::optional<std::string> unreachable() const;

 private:
  std::vector<UpstreamAddress> addresses_;
  std::string config_key_;
  AddressPicker picker_;
  mutable std::mutex mutex_;
  std::vector<std::optional<std::string>> problems_;  // guarded by mutex_
};

}  // namespace nackguard::net
