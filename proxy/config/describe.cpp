#include <sstream>

#include "proxy/config/config.hpp"

namespace nackguard::config {

std::string describe(const Config& config) {
  std::ostringstream out;
  out << "file: " << config.file.string() << "\n"
      << "listen.address: " << config.listen.host << "\n"
      << "listen.port: " << config.listen.port << "\n"
      << "upstream.host: " << config.upstream.host << "\n"
      << "upstream.port: " << config.upstream.port << "\n"
      << "upstream.connect_timeout: " << format_duration(config.upstream_connect_timeout) << "\n"
      << "threads: " << config.threads << "\n"
      << "policies_dir: " << config.policies_dir.string() << "\n"
      << "metrics.address: " << config.metrics.host << "\n"
      << "metrics.port: " << config.metrics.port << "\n"
      << "log.level: " << config.log_level << "\n"
      << "log.format: " << config.log_format << "\n"
      << "limits.max_frame_bytes: " << config.max_frame_bytes << "\n"
      << "limits.buffer_bytes: " << config.buffer_bytes << "\n"
      << "timeouts.handshake: " << format_duration(config.handshake_timeout) << "\n";
  return out.str();
}

}  // namespace nackguard::config
