#include "proxy/metrics/http_server.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

namespace nackguard::metrics {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A blocking client on a raw socket, so the test sends exactly the bytes it means to.
class RawClient {
 public:
  explicit RawClient(std::uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
      throw std::runtime_error("connect failed");
    }
  }
  ~RawClient() { close(); }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  void send(std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return;  // the server may close on us; the test checks what it read
      data.remove_prefix(static_cast<std::size_t>(n));
    }
  }

  // Reads until the server closes or `limit` passes. Sets closed() accordingly.
  std::string read_until_close(std::chrono::milliseconds limit = 5s) {
    std::string data;
    const auto deadline = Clock::now() + limit;
    while (read_some(data, deadline)) {
    }
    return data;
  }

  // Reads one response with a Content-Length body; nullopt if the server closed first.
  std::optional<std::string> read_response(std::chrono::milliseconds limit = 5s) {
    const auto deadline = Clock::now() + limit;
    for (;;) {
      const auto end_of_headers = pending_.find("\r\n\r\n");
      if (end_of_headers != std::string::npos) {
        const auto length_at = pending_.find("Content-Length: ");
        if (length_at != std::string::npos && length_at < end_of_headers) {
          const std::size_t length = std::stoul(pending_.substr(length_at + 16));
          const std::size_t total = end_of_headers + 4 + length;
          if (pending_.size() >= total) {
            std::string response = pending_.substr(0, total);
            pending_.erase(0, total);
            return response;
          }
        }
      }
      if (!read_some(pending_, deadline)) return std::nullopt;
    }
  }

  bool closed() const { return closed_; }

 private:
  // Appends what arrives; false once the peer closed or the deadline passed.
  bool read_some(std::string& data, Clock::time_point deadline) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left <= 0ms) return false;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    char buffer[4096];
    const ssize_t n = ::recv(fd_, buffer, sizeof buffer, 0);
    if (n <= 0) {
      closed_ = true;
      return false;
    }
    data.append(buffer, static_cast<std::size_t>(n));
    return true;
  }

  int fd_ = -1;
  bool closed_ = false;
  std::string pending_;
};

std::string status_line(const std::string& response) {
  return response.substr(0, response.find("\r\n"));
}

std::string body_of(const std::string& response) {
  const auto at = response.find("\r\n\r\n");
  return at == std::string::npos ? std::string() : response.substr(at + 4);
}

bool has_header(const std::string& response, const std::string& header) {
  const auto end = response.find("\r\n\r\n");
  const auto at = response.find("\r\n" + header + "\r\n");
  return at != std::string::npos && at < end;
}

std::string get(std::string_view path, std::string_view extra_headers = "") {
  return "GET " + std::string(path) + " HTTP/1.1\r\nHost: localhost\r\n" +
         std::string(extra_headers) + "\r\n";
}

template <typename Change>
HttpServerOptions options_with(Change change) {
  HttpServerOptions options;
  change(options);
  return options;
}

class HttpServerTest : public testing::Test {
 protected:
  void start(HttpServerOptions options = {}) {
    HttpHandlers handlers;
    handlers.metrics = [] { return std::string("nackguard_build_info{version=\"t\"} 1\n"); };
    handlers.not_ready_reason = [this]() -> std::optional<std::string> {
      std::lock_guard lock(mutex_);
      return not_ready_;
    };
    server_.emplace(io_, "127.0.0.1", 0, std::move(handlers), std::move(options));
    server_->start();
    port_ = server_->local_endpoint().port();
    thread_ = std::thread([this] { io_.run(); });
  }

  void TearDown() override {
    if (server_) server_->stop();
    work_.reset();
    io_.stop();
    if (thread_.joinable()) thread_.join();
  }

  void set_not_ready(std::optional<std::string> reason) {
    std::lock_guard lock(mutex_);
    not_ready_ = std::move(reason);
  }

  bool wait_for_connections(std::size_t n) {
    const auto deadline = Clock::now() + 5s;
    while (server_->connections() != n) {
      if (Clock::now() > deadline) return false;
      std::this_thread::sleep_for(5ms);
    }
    return true;
  }

  std::string exchange(std::string_view request) {
    RawClient client(port_);
    client.send(request);
    return client.read_until_close();
  }

  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_ =
      boost::asio::make_work_guard(io_);
  std::optional<HttpServer> server_;
  std::uint16_t port_ = 0;
  std::thread thread_;
  std::mutex mutex_;
  std::optional<std::string> not_ready_;
};

TEST_F(HttpServerTest, MetricsAnswers200WithTheTextFormatContentType) {
  start();
  EXPECT_NE(port_, 0);
  const std::string response = exchange(get("/metrics", "Connection: close\r\n"));
  EXPECT_EQ(status_line(response), "HTTP/1.1 200 OK");
  EXPECT_TRUE(has_header(response, "Content-Type: text/plain; version=0.0.4; charset=utf-8"));
  EXPECT_TRUE(has_header(response, "Connection: close"));
  EXPECT_EQ(body_of(response), "nackguard_build_info{version=\"t\"} 1\n");
}

TEST_F(HttpServerTest, Healthz) {
  start();
  const std::string response = exchange(get("/healthz", "Connection: close\r\n"));
  EXPECT_EQ(status_line(response), "HTTP/1.1 200 OK");
  EXPECT_EQ(body_of(response), "ok\n");
}

TEST_F(HttpServerTest, ReadyzFollowsTheReadinessCallback) {
  start();
  std::string response = exchange(get("/readyz", "Connection: close\r\n"));
  EXPECT_EQ(status_line(response), "HTTP/1.1 200 OK");
  EXPECT_EQ(body_of(response), "ready\n");

  set_not_ready("policies not loaded");
  response = exchange(get("/readyz", "Connection: close\r\n"));
  EXPECT_EQ(status_line(response), "HTTP/1.1 503 Service Unavailable");
  EXPECT_EQ(body_of(response), "not ready: policies not loaded\n");
}

TEST_F(HttpServerTest, UnknownPathIs404AndOtherMethodsAre405) {
  start();
  std::string response = exchange(get("/nope", "Connection: close\r\n"));
  EXPECT_EQ(status_line(response), "HTTP/1.1 404 Not Found");

  response = exchange(
      "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi");
  EXPECT_EQ(status_line(response), "HTTP/1.1 405 Method Not Allowed");
  EXPECT_TRUE(has_header(response, "Allow: GET"));
}

TEST_F(HttpServerTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  start();
  RawClient client(port_);
  client.send(get("/healthz"));
  auto first = client.read_response();
  ASSERT_TRUE(first);
  EXPECT_EQ(status_line(*first), "HTTP/1.1 200 OK");
  EXPECT_FALSE(has_header(*first, "Connection: close"));
  // Two pipelined requests in one write.
  client.send(get("/metrics") + get("/readyz"));
  auto second = client.read_response();
  auto third = client.read_response();
  ASSERT_TRUE(second && third);
  EXPECT_EQ(body_of(*second), "nackguard_build_info{version=\"t\"} 1\n");
  EXPECT_EQ(body_of(*third), "ready\n");
  EXPECT_FALSE(client.closed());
}

TEST_F(HttpServerTest, Http10WithoutKeepAliveIsClosedAfterTheResponse) {
  start();
  RawClient client(port_);
  client.send("GET /healthz HTTP/1.0\r\n\r\n");
  const std::string response = client.read_until_close();
  EXPECT_EQ(status_line(response), "HTTP/1.0 200 OK");
  EXPECT_TRUE(client.closed());
}

TEST_F(HttpServerTest, AnOverlongHeaderIs431AndClosed) {
  start();
  RawClient client(port_);
  client.send(get("/metrics", "X-Long: " + std::string(10000, 'a') + "\r\n"));
  const std::string response = client.read_until_close();
  EXPECT_EQ(status_line(response), "HTTP/1.1 431 Request Header Fields Too Large");
  EXPECT_TRUE(has_header(response, "Connection: close"));
  EXPECT_TRUE(client.closed());
}

TEST_F(HttpServerTest, ATooLargeBodyIs413) {
  start();
  RawClient client(port_);
  client.send("POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n" +
              std::string(5000, 'b'));
  const std::string response = client.read_until_close();
  EXPECT_EQ(status_line(response), "HTTP/1.1 413 Payload Too Large");
  EXPECT_TRUE(client.closed());
}

TEST_F(HttpServerTest, GarbageIs400AndClosed) {
  start();
  RawClient client(port_);
  client.send("\x01\x02 garbage \xff\r\n\r\n");
  const std::string response = client.read_until_close();
  EXPECT_EQ(status_line(response), "HTTP/1.1 400 Bad Request");
  EXPECT_TRUE(client.closed());
}

TEST_F(HttpServerTest, ARequestThatNeverFinishesIsCutAtTheReadTimeout) {
  start(options_with([](auto& o) { o.read_timeout = 300ms; }));
  RawClient client(port_);
  const auto started = Clock::now();
  client.send("GET /metrics HTTP/1.1\r\nHost: x\r\n");  // no blank line, ever
  const std::string response = client.read_until_close(5s);
  const auto elapsed = Clock::now() - started;
  EXPECT_TRUE(client.closed());
  EXPECT_EQ(response, "");
  EXPECT_GE(elapsed, 250ms);
  EXPECT_LT(elapsed, 3s);
}

TEST_F(HttpServerTest, ADripFedRequestIsCutAtTheReadTimeoutToo) {
  start(options_with([](auto& o) { o.read_timeout = 300ms; }));
  RawClient client(port_);
  const auto started = Clock::now();
  // A byte every 50 ms: the whole request would take about 2 s, each byte well within 300 ms.
  const std::string request = get("/metrics");
  std::string response;
  for (std::size_t i = 0; i + 1 < request.size() && !client.closed(); ++i) {
    client.send(request.substr(i, 1));
    response += client.read_until_close(50ms);
  }
  const auto elapsed = Clock::now() - started;
  EXPECT_TRUE(client.closed());
  EXPECT_EQ(response, "");
  EXPECT_GE(elapsed, 250ms);
  EXPECT_LT(elapsed, 1500ms);
}

TEST_F(HttpServerTest, AnIdleKeepAliveConnectionIsClosedAfterTheReadTimeout) {
  start(options_with([](auto& o) { o.read_timeout = 300ms; }));
  RawClient client(port_);
  client.send(get("/healthz"));
  ASSERT_TRUE(client.read_response());
  client.read_until_close(3s);
  EXPECT_TRUE(client.closed());
  EXPECT_TRUE(wait_for_connections(0));
}

TEST_F(HttpServerTest, ConnectionsBeyondTheCapAreClosedAtOnce) {
  start(options_with([](auto& o) { o.max_connections = 2; }));
  RawClient first(port_);
  RawClient second(port_);
  ASSERT_TRUE(wait_for_connections(2));

  RawClient third(port_);
  third.send(get("/healthz"));
  EXPECT_EQ(third.read_until_close(2s), "");
  EXPECT_TRUE(third.closed());

  first.close();
  ASSERT_TRUE(wait_for_connections(1));
  RawClient fourth(port_);
  fourth.send(get("/healthz", "Connection: close\r\n"));
  EXPECT_EQ(status_line(fourth.read_until_close()), "HTTP/1.1 200 OK");
}

TEST_F(HttpServerTest, StopClosesOpenConnectionsAndStopsAccepting) {
  start();
  RawClient client(port_);
  client.send(get("/healthz"));
  ASSERT_TRUE(client.read_response());
  server_->stop();
  server_->stop();  // a second call does nothing
  client.read_until_close(2s);
  EXPECT_TRUE(client.closed());
  EXPECT_TRUE(wait_for_connections(0));
  EXPECT_THROW(
      {
        RawClient late(port_);
        late.send(get("/healthz"));
        if (late.read_until_close(1s).empty()) throw std::runtime_error("refused");
      },
      std::runtime_error);
}

TEST(HttpServerBind, AnAddressInUseNamesItAndTheKey) {
  boost::asio::io_context io;
  HttpServer first(io, "127.0.0.1", 0, {});
  const std::uint16_t port = first.local_endpoint().port();
  try {
    HttpServer second(io, "127.0.0.1", port, {});
    FAIL() << "bound twice";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << what;
    EXPECT_NE(what.find("choose a free metrics.port"), std::string::npos) << what;
  }
}

TEST(HttpServerBind, ANonAddressIsRejected) {
  boost::asio::io_context io;
  try {
    HttpServer server(io, "localhost:9464", 9464, {});
    FAIL() << "accepted a host:port as an address";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("metrics.address \"localhost:9464\""), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace nackguard::metrics
