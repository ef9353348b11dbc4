#include "proxy/net/upstreams.hpp"

namespace nackguard::net {

Upstreams::Upstreams(const std::vector<config::Endpoint>& addresses, std::string config_key,
                     AddressPicker::Now now)
    : config_key_(std::move(config_key)), picker_(addresses.size(), std::move(now)) {
  for (const config::Endpoint& endpoint : addresses) {
    addresses_.push_back({endpoint.host, endpoint.port, config::to_string(endpoint)});
    problems_.emplace_back("upstream " + addresses_.back().name + " has not been probed yet");
  }
}

std::vector<std::string> Upstreams::names() const {
  std::vector<std::string> out;
  for (const UpstreamAddress& address : addresses_) out.push_back(address.name);
  return out;
}

void Upstreams::probed(std::size_t index, std::optional<std::string> problem) {
  if (index >= addresses_.size()) return;
  if (problem) {
    picker_.failed(index);
  } else {
    picker_.succeeded(index);
  }
  std::lock_guard lock(mutex_);
  problems_[index] = std::move(problem);
}

std::optional<std::string> Upstreams::unreachable() const {
  std::lock_guard lock(mutex_);
  std::string all;
  for (const std::optional<std::string>& problem : problems_) {
    if (!problem) return std::nullopt;
    if (!all.empty()) all += "; ";
    all += *problem;
  }
  return all;
}

}  // namespace nackguard::net
