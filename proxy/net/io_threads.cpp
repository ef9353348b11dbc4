#include "proxy/net/io_threads.hpp"

#include <exception>

namespace nackguard::net {

void run_reporting_errors(boost::asio::io_context& io,
                          const std::function<void(const std::string&)>& on_error) {
  for (;;) {
    try {
      io.run();
      return;
    } catch (const std::exception& e) {
      on_error(e.what());
    } catch (...) {
      on_error("an exception that is not a std::exception");
    }
  }
}

}  // namespace nackguard::net
