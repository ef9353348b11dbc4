// connect_upstream and probe_address against real loopback sockets: the plan is tried in order,
// a refused address is counted under its own label and skipped afterwards, the give-up is
// counted once; and the broker identity each TLS connection expects.

#include "proxy/net/upstream_connect.hpp"

#include <gtest/gtest.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <string>

namespace nackguard::net {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;

// A port nothing listens on (bound once, then closed): connects to it are refused.
std::uint16_t closed_port(asio::io_context& io) {
  tcp::acceptor probe(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  const std::uint16_t port = probe.local_endpoint().port();
  probe.close();
  return port;
}

class UpstreamConnect : public ::testing::Test {
 protected:
  UpstreamConnect() : listener_(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {}

  std::uint16_t open_port() const { return listener_.local_endpoint().port(); }

  void use(std::vector<config::Endpoint> addresses) {
    upstreams_ = std::make_unique<Upstreams>(addresses, "upstream.addresses");
    metrics::RegistryOptions options;
    options.upstream_addresses = upstreams_->names();
    registry_ = std::make_unique<metrics::Registry>(options);
  }

  std::optional<std::size_t> connect() {
    UpstreamConnectOptions options;
    options.upstreams = upstreams_.get();
    options.connect_timeout = std::chrono::milliseconds(2000);
    options.tls = &tls_;
    options.metrics = registry_.get();
    Stream stream(Stream::Tcp(io_.get_executor()));
    std::optional<std::size_t> result;
    bool done = false;
    asio::co_spawn(io_, connect_upstream(stream, options, 1),
                   [&](std::exception_ptr error, std::optional<std::size_t> index) {
                     if (error) std::rethrow_exception(error);
                     result = index;
                     done = true;
                   });
    io_.restart();
    io_.run();
    EXPECT_TRUE(done);
    if (result) {
      EXPECT_TRUE(stream.tcp().is_open());
      EXPECT_EQ(stream.tcp().remote_endpoint().port(), upstreams_->addresses()[*result].port);
    }
    return result;
  }

  std::optional<std::string> probe(const UpstreamAddress& address) {
    std::optional<std::string> result;
    asio::co_spawn(io_, probe_address(address, std::chrono::milliseconds(2000)),
                   [&](std::exception_ptr error, std::optional<std::string> problem) {
                     if (error) std::rethrow_exception(error);
                     result = std::move(problem);
                   });
    io_.restart();
    io_.run();
    return result;
  }

  bool page_has(const std::string& line) const {
    return registry_->render().find("\n" + line + "\n") != std::string::npos;
  }

  asio::io_context io_;
  tcp::acceptor listener_;  // accepts into its backlog; nothing is read
  TlsContexts tls_;
  std::unique_ptr<Upstreams> upstreams_;
  std::unique_ptr<metrics::Registry> registry_;
};

TEST_F(UpstreamConnect, ARefusedAddressIsCountedAndTheNextOneIsUsed) {
  const std::uint16_t refused = closed_port(io_);
  use({{"127.0.0.1", refused}, {"127.0.0.1", open_port()}});
  EXPECT_EQ(connect(), 1u);
  const std::string refused_name = "127.0.0.1:" + std::to_string(refused);
  const std::string open_name = "127.0.0.1:" + std::to_string(open_port());
  EXPECT_TRUE(
      page_has("nackguard_upstream_connect_failures_total{address=\"" + refused_name + "\"} 1"));
  EXPECT_TRUE(
      page_has("nackguard_upstream_connect_failures_total{address=\"" + open_name + "\"} 0"));
  EXPECT_TRUE(page_has("nackguard_upstream_unavailable_total 0"));
  EXPECT_TRUE(upstreams_->picker().skipped(0));
  // The next connection's turn starts at address 1, and address 0 is skipped anyway: no new
  // failure is counted.
  EXPECT_EQ(connect(), 1u);
  EXPECT_TRUE(
      page_has("nackguard_upstream_connect_failures_total{address=\"" + refused_name + "\"} 1"));
}

TEST_F(UpstreamConnect, ConnectionsRotateOverTheAddresses) {
  tcp::acceptor second(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  use({{"127.0.0.1", open_port()}, {"localhost", second.local_endpoint().port()}});
  EXPECT_EQ(connect(), 0u);
  EXPECT_EQ(connect(), 1u);
  EXPECT_EQ(connect(), 0u);
}

TEST_F(UpstreamConnect, WhenEveryAddressFailsTheGiveUpIsCountedOnce) {
  const std::uint16_t a = closed_port(io_);
  const std::uint16_t b = closed_port(io_);
  use({{"127.0.0.1", a}, {"127.0.0.1", b}});
  EXPECT_EQ(connect(), std::nullopt);
  EXPECT_TRUE(page_has("nackguard_upstream_unavailable_total 1"));
  EXPECT_TRUE(page_has("nackguard_upstream_connect_failures_total{address=\"127.0.0.1:" +
                       std::to_string(a) + "\"} 1"));
  EXPECT_TRUE(page_has("nackguard_upstream_connect_failures_total{address=\"127.0.0.1:" +
                       std::to_string(b) + "\"} 1"));
  // Both are skipped now, yet the next client still gets one attempt (the oldest failure).
  EXPECT_EQ(connect(), std::nullopt);
  EXPECT_TRUE(page_has("nackguard_upstream_unavailable_total 2"));
  EXPECT_TRUE(page_has("nackguard_upstream_connect_failures_total{address=\"127.0.0.1:" +
                       std::to_string(a) + "\"} 2"));
}

TEST_F(UpstreamConnect, ANodeThatComesBackIsFoundByTheNextClient) {
  const std::uint16_t port = closed_port(io_);
  use({{"127.0.0.1", port}});
  EXPECT_EQ(connect(), std::nullopt);
  tcp::acceptor back(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  EXPECT_EQ(connect(), 0u);
  EXPECT_FALSE(upstreams_->picker().skipped(0));
}

TEST_F(UpstreamConnect, ProbeSaysWhichAddressDoesNotAnswer) {
  const std::uint16_t refused = closed_port(io_);
  EXPECT_EQ(probe({"127.0.0.1", open_port(), "127.0.0.1:" + std::to_string(open_port())}),
            std::nullopt);
  const std::string name = "127.0.0.1:" + std::to_string(refused);
  EXPECT_EQ(probe({"127.0.0.1", refused, name}),
            "upstream " + name + " does not answer: Connection refused");
}

// What a name resolving to several IP addresses gets: each IP in turn until one accepts.
TEST_F(UpstreamConnect, EveryIpAddressOfANameIsTriedInTurn) {
  use({{"rabbit", open_port()}});
  const auto loopback = asio::ip::make_address("127.0.0.1");
  auto run = [&](std::vector<tcp::endpoint> endpoints) {
    UpstreamConnectOptions options;
    options.upstreams = upstreams_.get();
    options.connect_timeout = std::chrono::milliseconds(2000);
    options.tls = &tls_;
    Stream stream(Stream::Tcp(io_.get_executor()));
    std::optional<std::uint16_t> connected_port;
    asio::co_spawn(io_,
                   connect_endpoints(stream, upstreams_->addresses()[0], endpoints, options, 1),
                   [&](std::exception_ptr error, bool connected) {
                     if (error) std::rethrow_exception(error);
                     if (connected) connected_port = stream.tcp().remote_endpoint().port();
                   });
    io_.restart();
    io_.run();
    return connected_port;
  };
  const std::uint16_t refused = closed_port(io_);
  EXPECT_EQ(run({{loopback, refused}, {loopback, open_port()}}), open_port());
  EXPECT_EQ(run({{loopback, refused}, {loopback, refused}}), std::nullopt);
  EXPECT_EQ(run({}), std::nullopt);
}

// SNI and the checked name: upstream.tls.server_name when set, else the address's own host.
class BrokerIdentity : public ::testing::Test {
 protected:
  BrokerIdentity()
      : context_(asio::ssl::context::tls_client), ssl_(SSL_new(context_.native_handle())) {}
  ~BrokerIdentity() override { SSL_free(ssl_); }

  std::string sni() const {
    const char* name = SSL_get_servername(ssl_, TLSEXT_NAMETYPE_host_name);
    return name ? name : "";
  }
  std::string checked_host() const {
    const char* host = X509_VERIFY_PARAM_get0_host(SSL_get0_param(ssl_), 0);
    return host ? host : "";
  }

  asio::ssl::context context_;
  SSL* ssl_;
  TlsContexts tls_;
};

TEST_F(BrokerIdentity, EachAddressHostWhenNoServerNameIsSet) {
  expect_broker_identity(ssl_, tls_, "rabbit-1.rabbit");
  EXPECT_EQ(sni(), "rabbit-1.rabbit");
  EXPECT_EQ(checked_host(), "rabbit-1.rabbit");
}

TEST_F(BrokerIdentity, ServerNameWinsOverTheAddress) {
  tls_.upstream_server_name = "rabbit.example";
  expect_broker_identity(ssl_, tls_, "rabbit-1.rabbit");
  EXPECT_EQ(sni(), "rabbit.example");
  EXPECT_EQ(checked_host(), "rabbit.example");
}

TEST_F(BrokerIdentity, AnIpAddressIsCheckedButNotSentAsSni) {
  expect_broker_identity(ssl_, tls_, "10.0.0.7");
  EXPECT_EQ(sni(), "");
  EXPECT_EQ(checked_host(), "");
}

}  // namespace
}  // namespace nackguard::net
