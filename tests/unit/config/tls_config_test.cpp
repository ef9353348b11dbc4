// listen.tls and upstream.tls: paths resolved against the config file's directory, defaults,
// and every way the keys can be wrong, each message naming file:line:column and the key.
// Whether OpenSSL accepts the files is tested by tests/integration/test_tls.py.

#include <gtest/gtest.h>

#include <string>

#include "config/config_test_support.hpp"
#include "proxy/config/config.hpp"

namespace nackguard::config {
namespace {

namespace fs = std::filesystem;
using namespace testing;  // config_error_of, contains, starts_with, TempTree

class TlsConfig : public testing::ConfigFileTest {
 protected:
  TlsConfig() {
    for (const char* name : {"server.pem", "server.key", "ca.pem"}) tree_.write("PEM", name);
  }

  fs::path conf(std::string_view name) const { return tree_.root() / "conf" / name; }
};

TEST_F(TlsConfig, AbsentMeansPlainTcp) {
  const Config config = load("listen: {port: 5700}\n");
  EXPECT_FALSE(config.listen_tls.has_value());
  EXPECT_FALSE(config.upstream_tls.has_value());
}

TEST_F(TlsConfig, ListenPathsAreRelativeToTheConfigFile) {
  const Config config = load(R"(listen:
  tls:
    cert_file: server.pem
    key_file: ./server.key
    ca_file: ../conf/ca.pem
    require_client_cert: true
)");
  ASSERT_TRUE(config.listen_tls.has_value());
  EXPECT_EQ(config.listen_tls->cert_file.path, conf("server.pem"));
  EXPECT_EQ(config.listen_tls->key_file.path, conf("server.key"));
  EXPECT_EQ(config.listen_tls->ca_file.path, conf("ca.pem"));
  EXPECT_TRUE(config.listen_tls->require_client_cert);
  // Kept for the messages of the TLS loader, which finds problems only OpenSSL can see.
  EXPECT_EQ(config.listen_tls->cert_file.key_location,
            conf("nackguard.yaml").string() + ":3:16: listen.tls.cert_file");
}

TEST_F(TlsConfig, AbsolutePathsAreKept) {
  const std::string cert = conf("server.pem").string();
  const Config config = load("listen:\n  tls: {cert_file: " + cert + ", key_file: server.key}\n");
  EXPECT_EQ(config.listen_tls->cert_file.path, conf("server.pem"));
  EXPECT_TRUE(config.listen_tls->ca_file.empty());
  EXPECT_FALSE(config.listen_tls->require_client_cert);
}

TEST_F(TlsConfig, UpstreamDefaults) {
  const Config config = load("upstream:\n  host: rabbit.internal\n  tls: {}\n");
  ASSERT_TRUE(config.upstream_tls.has_value());
  EXPECT_TRUE(config.upstream_tls->verify);
  EXPECT_TRUE(config.upstream_tls->ca_file.empty());  // the system trust store
  EXPECT_EQ(config.upstream_tls->server_name, "rabbit.internal");
  EXPECT_TRUE(config.upstream_tls->cert_file.empty());
  EXPECT_TRUE(config.upstream_tls->key_file.empty());
}

TEST_F(TlsConfig, UpstreamEveryKey) {
  const Config config = load(R"(upstream:
  tls:
    ca_file: ca.pem
    verify: false
    server_name: rabbit.example
    cert_file: server.pem
    key_file: server.key
  host: 10.0.0.5
)");
  EXPECT_FALSE(config.upstream_tls->verify);
  EXPECT_EQ(config.upstream_tls->ca_file.path, conf("ca.pem"));
  EXPECT_EQ(config.upstream_tls->server_name, "rabbit.example");
  EXPECT_EQ(config.upstream_tls->cert_file.path, conf("server.pem"));
  EXPECT_EQ(config.upstream_tls->key_file.path, conf("server.key"));
}

TEST_F(TlsConfig, ServerNameDefaultsToTheHostWhereverTlsIsWritten) {
  EXPECT_EQ(load("upstream:\n  tls: {}\n  host: late.example\n").upstream_tls->server_name,
            "late.example");
}

TEST_F(TlsConfig, DescribeListsTheTlsKeys) {
  const std::string text = describe(load(R"(listen:
  tls: {cert_file: server.pem, key_file: server.key}
upstream:
  tls: {verify: false}
)"));
  EXPECT_TRUE(contains(text, "listen.tls.cert_file: " + conf("server.pem").string() + "\n"));
  EXPECT_TRUE(contains(text, "listen.tls.ca_file: (none: no client certificate asked for)\n"));
  EXPECT_TRUE(contains(text, "listen.tls.require_client_cert: false\n"));
  EXPECT_TRUE(contains(text, "upstream.tls.verify: false\n"));
  EXPECT_TRUE(contains(text, "upstream.tls.server_name: 127.0.0.1\n"));
  EXPECT_TRUE(contains(text, "upstream.tls.cert_file: (none)\n"));
  EXPECT_FALSE(contains(describe(load("")), "tls"));
}

// --- errors ---

TEST_F(TlsConfig, ListenNeedsCertAndKey) {
  EXPECT_EQ(error_for("listen:\n  tls: {key_file: server.key}\n"),
            "FILE:2:8: listen.tls: cert_file is missing; TLS towards clients needs the proxy's "
            "certificate (cert_file) and its private key (key_file), both PEM files");
  EXPECT_TRUE(starts_with(error_for("listen:\n  tls: {}\n"),
                          "FILE:2:8: listen.tls: cert_file and key_file are missing"));
  EXPECT_TRUE(starts_with(error_for("listen:\n  tls: {cert_file: server.pem}\n"),
                          "FILE:2:8: listen.tls: key_file is missing"));
}

TEST_F(TlsConfig, RequiredClientCertNeedsACaFile) {
  EXPECT_EQ(error_for("listen:\n  tls:\n    cert_file: server.pem\n    key_file: server.key\n"
                      "    require_client_cert: true\n"),
            "FILE:5:26: listen.tls.require_client_cert: true needs listen.tls.ca_file, the PEM "
            "file of the CAs that sign the clients' certificates");
}

TEST_F(TlsConfig, MissingFileNamesKeyPathAndBase) {
  const std::string message =
      error_for("listen:\n  tls:\n    cert_file: server.pem\n    key_file: keys/missing.key\n");
  EXPECT_EQ(message, "FILE:4:15: listen.tls.key_file: the private key file " +
                         conf("keys/missing.key").string() +
                         " does not exist (set to \"keys/missing.key\", relative to " +
                         conf("").parent_path().string() +
                         "); fix the path, or let the user running nackguard read the file");
}

TEST_F(TlsConfig, DirectoryIsNotAFile) {
  EXPECT_TRUE(contains(error_for("upstream:\n  tls: {ca_file: ../policies}\n"),
                       "upstream.tls.ca_file: the CA file " + (tree_.root() / "policies").string() +
                           " is a directory, not a file"));
}

TEST_F(TlsConfig, EmptyPathIsRefused) {
  EXPECT_EQ(error_for("upstream:\n  tls: {ca_file: \"\"}\n"),
            "FILE:2:18: upstream.tls.ca_file: expected a file path, got an empty string");
}

TEST_F(TlsConfig, ClientCertificateNeedsBothFiles) {
  EXPECT_EQ(error_for("upstream:\n  tls: {cert_file: server.pem}\n"),
            "FILE:2:20: upstream.tls.cert_file: set without key_file; a client certificate "
            "needs both cert_file and key_file (PEM files), or neither");
  EXPECT_TRUE(starts_with(error_for("upstream:\n  tls: {key_file: server.key}\n"),
                          "FILE:2:19: upstream.tls.key_file: set without cert_file"));
}

TEST_F(TlsConfig, EmptyTlsIsRefusedNotGuessed) {
  EXPECT_EQ(error_for("listen:\n  tls:\n  port: 5700\n"),
            "FILE:2:3: listen.tls: expected a map with the keys cert_file, key_file, ca_file, "
            "require_client_cert, got nothing; remove tls for plain TCP");
  EXPECT_TRUE(starts_with(error_for("upstream:\n  tls:\n"),
                          "FILE:2:3: upstream.tls: expected a map with the keys ca_file, verify, "
                          "server_name, cert_file, key_file (or {} for the defaults), got "
                          "nothing"));
}

TEST_F(TlsConfig, TlsGivenAScalar) {
  EXPECT_TRUE(starts_with(error_for("upstream:\n  tls: yes\n"),
                          "FILE:2:8: upstream.tls: expected a map with the keys ca_file, verify, "
                          "server_name, cert_file, key_file, got the scalar \"yes\""));
}

TEST_F(TlsConfig, BooleansAreTrueOrFalse) {
  EXPECT_EQ(error_for("upstream:\n  tls: {verify: yes}\n"),
            "FILE:2:17: upstream.tls.verify: expected one of true, false, got \"yes\"");
  EXPECT_TRUE(starts_with(error_for("upstream:\n  tls: {verify: ture}\n"),
                          "FILE:2:17: upstream.tls.verify: expected one of true, false, got "
                          "\"ture\" (did you mean \"true\"?)"));
}

TEST_F(TlsConfig, UnknownKeyGetsASuggestion) {
  EXPECT_EQ(
      error_for("upstream:\n  tls: {ca_flie: ca.pem}\n"),
      "FILE:2:9: unknown key \"upstream.tls.ca_flie\" (did you mean \"ca_file\"?); valid keys "
      "here: ca_file, verify, server_name, cert_file, key_file");
  EXPECT_TRUE(starts_with(error_for("listen:\n  tls: {cert: server.pem}\n"),
                          "FILE:2:9: unknown key \"listen.tls.cert\" (did you mean "
                          "\"cert_file\"?)"));
}

TEST_F(TlsConfig, ServerNameIsOneWord) {
  EXPECT_EQ(error_for("upstream:\n  tls: {server_name: \"two words\"}\n"),
            "FILE:2:22: upstream.tls.server_name: expected a host name, got \"two words\"");
}

}  // namespace
}  // namespace nackguard::config
