#pragma once
// Running an io_context on worker threads so that an exception escaping a handler is logged
// instead of ending the process through std::terminate without a word.

#include <boost/asio/io_context.hpp>
#include <functional>
#include <string>

namespace nackguard::net {

// Runs `io` on the calling thread until it stops or runs out of work. An exception escaping a
// handler (a detached coroutine's included) is reported to `on_error` with what it said, and
// the thread goes back to running `io`: the handler's own work is lost, the others' goes on.
void run_reporting_errors(boost::asio::io_context& io,
                          const std::function<void(const std::string&)>& on_error);

}  // namespace nackguard::net
