// TlsStream, the relay's TLS: OpenSSL reading and writing the socket itself. Two of them talk
// over loopback with a throw-away self-signed certificate.

#include <gtest/gtest.h>

#include <openssl/evp.h>
#include <openssl/x509.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <memory>
#include <numeric>
#include <vector>

#include "proxy/net/stream.hpp"

namespace nackguard::net {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using Bytes = std::vector<unsigned char>;

// A server context with a fresh P-256 key and a certificate for "localhost", and a client
// context that does not verify it.
struct Contexts {
  asio::ssl::context server{asio::ssl::context::tls_server};
  asio::ssl::context client{asio::ssl::context::tls_client};
  Contexts() {
    std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(EVP_EC_gen("P-256"), EVP_PKEY_free);
    std::unique_ptr<X509, decltype(&X509_free)> cert(X509_new(), X509_free);
    if (!key || !cert) throw std::bad_alloc();
    X509_set_version(cert.get(), 2);
    ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), 1);
    X509_gmtime_adj(X509_getm_notBefore(cert.get()), 0);
    X509_gmtime_adj(X509_getm_notAfter(cert.get()), 3600);
    X509_set_pubkey(cert.get(), key.get());
    X509_NAME* name = X509_get_subject_name(cert.get());
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>("localhost"), -1, -1, 0);
    X509_set_issuer_name(cert.get(), name);
    X509_sign(cert.get(), key.get(), EVP_sha256());
    SSL_CTX_use_certificate(server.native_handle(), cert.get());
    SSL_CTX_use_PrivateKey(server.native_handle(), key.get());
    SSL_CTX_set_verify(client.native_handle(), SSL_VERIFY_NONE, nullptr);
  }
};

// A client and a server Stream over loopback, TLS started on both, not yet shaken hands.
struct Pair {
  asio::io_context io;
  Contexts contexts;
  tcp::acceptor acceptor{io, tcp::endpoint(asio::ip::address_v4::loopback(), 0)};
  Stream client{tcp::socket(io)};
  Stream server{tcp::socket(io)};
  Pair() {
    client.tcp().connect(acceptor.local_endpoint());
    server.tcp() = acceptor.accept();
    client.start_tls(contexts.client);
    server.start_tls(contexts.server);
  }
  // Runs `body` after both handshakes, then the io_context until everything is done.
  template <typename Body>
  void run(Body body) {
    bool handshaken = false;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          auto failure =
              co_await server.handshake(asio::ssl::stream_base::server, deadline, TlsPeer::client);
          EXPECT_FALSE(failure) << failure->reason;
        },
        asio::detached);
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          auto failure =
              co_await client.handshake(asio::ssl::stream_base::client, deadline, TlsPeer::broker);
          EXPECT_FALSE(failure) << failure->reason;
          handshaken = !failure;
        },
        asio::detached);
    io.run();
    ASSERT_TRUE(handshaken);
    io.restart();
    body();
    io.run();
  }
};

Bytes pattern(std::size_t size) {
  Bytes bytes(size);
  std::iota(bytes.begin(), bytes.end(), 7);
  return bytes;
}

// Reads until `want` bytes came or the stream ends; the reads' sizes go to `reads`.
asio::awaitable<void> read_all(Stream& stream, Bytes& got, std::size_t want,
                               boost::system::error_code& end, std::vector<std::size_t>* reads) {
  Bytes space(256 * 1024);
  while (got.size() < want) {
    auto [ec, n] = co_await stream.read_some(space.data(), space.size());
    if (ec) {
      end = ec;
      co_return;
    }
    if (reads) reads->push_back(n);
    got.insert(got.end(), space.begin(), space.begin() + static_cast<std::ptrdiff_t>(n));
  }
}

TEST(TlsStream, FourMebibytesEachWayArriveIntact) {
  Pair pair;
  Bytes up = pattern(4 << 20), down = pattern((4 << 20) + 13);
  Bytes got_up, got_down;
  boost::system::error_code write_up, write_down, end_up, end_down;
  pair.run([&] {
    asio::co_spawn(
        pair.io,
        [&]() -> asio::awaitable<void> {
          auto [ec, n] = co_await pair.client.write(up.data(), up.size());
          write_up = ec;
          EXPECT_EQ(n, up.size());
        },
        asio::detached);
    asio::co_spawn(
        pair.io,
        [&]() -> asio::awaitable<void> {
          auto [ec, n] = co_await pair.server.write(down.data(), down.size());
          write_down = ec;
          EXPECT_EQ(n, down.size());
        },
        asio::detached);
    asio::co_spawn(pair.io, read_all(pair.server, got_up, up.size(), end_up, nullptr),
                   asio::detached);
    asio::co_spawn(pair.io, read_all(pair.client, got_down, down.size(), end_down, nullptr),
                   asio::detached);
  });
  EXPECT_FALSE(write_up) << write_up.message();
  EXPECT_FALSE(write_down) << write_down.message();
  EXPECT_FALSE(end_up) << end_up.message();
  EXPECT_FALSE(end_down) << end_down.message();
  EXPECT_TRUE(got_up == up);
  EXPECT_TRUE(got_down == down);
}

// Asio's ssl::stream hands out one record per read: a publish sent as three writes took
// three reads. Records already received come out of one read together.
TEST(TlsStream, OneReadTakesEveryRecordAlreadyReceived) {
  Pair pair;
  Bytes got;
  std::vector<std::size_t> reads;
  boost::system::error_code end;
  pair.run([&] {
    asio::co_spawn(
        pair.io,
        [&]() -> asio::awaitable<void> {
          Bytes record = pattern(100);
          for (int i = 0; i < 10; ++i) co_await pair.client.write(record.data(), record.size());
          // Until the server's socket holds all ten records.
          asio::steady_timer settle(pair.io, std::chrono::milliseconds(50));
          co_await settle.async_wait(asio::use_awaitable);
          co_await read_all(pair.server, got, 1000, end, &reads);
        },
        asio::detached);
  });
  EXPECT_FALSE(end) << end.message();
  EXPECT_EQ(got.size(), 1000u);
  EXPECT_EQ(reads, std::vector<std::size_t>{1000});
}

TEST(TlsStream, ThePeersCloseNotifyIsEofAndABareCloseIsTruncation) {
  for (bool notify : {true, false}) {
    Pair pair;
    Bytes got;
    boost::system::error_code end;
    pair.run([&] {
      asio::co_spawn(
          pair.io,
          [&]() -> asio::awaitable<void> {
            // A FIN, not close(): the client has not read the server's session tickets, and
            // closing with unread input would send a reset instead.
            if (notify) {
              co_await pair.client.shutdown_send(std::chrono::seconds(1));
            } else {
              pair.client.tcp().shutdown(tcp::socket::shutdown_send);
            }
          },
          asio::detached);
      asio::co_spawn(pair.io, read_all(pair.server, got, 1, end, nullptr), asio::detached);
    });
    if (notify) {
      EXPECT_EQ(end, asio::error::eof) << end.message();
    } else {
      EXPECT_EQ(end, asio::ssl::error::stream_truncated) << end.message();
    }
  }
}

// flush() sends without waiting (try_send) until the socket is full; the writer then sends the
// rest, from a copy (the relay moves what is left into its output queue). The record the full
// socket cut stays in OpenSSL and is finished by that write: the peer gets every byte once, in
// order.
TEST(TlsStream, ARecordCutByAFullSocketIsFinishedByTheNextWrite) {
  Pair pair;
  const Bytes data = pattern(8 << 20);
  Bytes got;
  std::size_t sent_at_once = 0;
  boost::system::error_code try_ec, write_ec, end;
  pair.run([&] {
    // Nobody reads yet: the socket fills.
    sent_at_once = pair.client.try_send(data.data(), data.size(), try_ec);
    asio::co_spawn(
        pair.io,
        [&]() -> asio::awaitable<void> {
          Bytes rest(data.begin() + static_cast<std::ptrdiff_t>(sent_at_once), data.end());
          auto [ec, n] = co_await pair.client.write(rest.data(), rest.size());
          write_ec = ec;
          EXPECT_EQ(n, rest.size());
        },
        asio::detached);
    asio::co_spawn(pair.io, read_all(pair.server, got, data.size(), end, nullptr), asio::detached);
  });
  EXPECT_FALSE(try_ec) << try_ec.message();
  EXPECT_GT(sent_at_once, 0u);
  EXPECT_LT(sent_at_once, data.size()) << "the socket took 8 MiB: nothing was cut";
  EXPECT_FALSE(write_ec) << write_ec.message();
  EXPECT_FALSE(end) << end.message();
  EXPECT_EQ(got.size(), data.size());
  EXPECT_TRUE(got == data);
}

TEST(TlsStream, TrySendToAPeerThatIsGoneFails) {
  Pair pair;
  boost::system::error_code ec;
  pair.run([&] {
    pair.server.close();
    const Bytes chunk = pattern(64 * 1024);
    for (int i = 0; i < 1000 && !ec; ++i) pair.client.try_send(chunk.data(), chunk.size(), ec);
  });
  EXPECT_TRUE(ec);
}

// The write fails with an error; the process gets no SIGPIPE (it would end the test run).
TEST(TlsStream, WritingToAPeerThatIsGoneFailsWithoutSigpipe) {
  Pair pair;
  boost::system::error_code write_ec;
  pair.run([&] {
    pair.server.close();
    asio::co_spawn(
        pair.io,
        [&]() -> asio::awaitable<void> {
          Bytes chunk = pattern(64 * 1024);
          for (int i = 0; i < 1000 && !write_ec; ++i) {
            auto [ec, n] = co_await pair.client.write(chunk.data(), chunk.size());
            write_ec = ec;
          }
        },
        asio::detached);
  });
  EXPECT_TRUE(write_ec);
}

}  // namespace
}  // namespace nackguard::net
