// run_reporting_errors: an exception escaping a handler on a worker thread is reported and the
// threads go on running the others' handlers (without it, std::terminate ended the process).

#include "proxy/net/io_threads.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/post.hpp>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

namespace nackguard::net {
namespace {

namespace asio = boost::asio;

TEST(IoThreads, AnEscapingExceptionIsReportedAndTheOtherHandlersStillRun) {
  asio::io_context io(2);
  std::mutex mutex;
  std::vector<std::string> errors;
  std::atomic<int> ran{0};
  asio::post(io, [] { throw std::runtime_error("handler failed"); });
  asio::post(io, [] { throw 42; });
  for (int i = 0; i < 10; ++i) asio::post(io, [&] { ++ran; });
  auto report = [&](const std::string& what) {
    std::lock_guard lock(mutex);
    errors.push_back(what);
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) threads.emplace_back([&] { run_reporting_errors(io, report); });
  for (auto& t : threads) t.join();  // io ran out of work: both threads returned
  EXPECT_EQ(ran.load(), 10);
  std::sort(errors.begin(), errors.end());
  EXPECT_EQ(errors, (std::vector<std::string>{"an exception that is not a std::exception",
                                              "handler failed"}));
}

}  // namespace
}  // namespace nackguard::net
