// The address label: one series per configured upstream address, in the configured order,
// and nothing else (the label set is bounded by the list).

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "proxy/metrics/registry.hpp"

namespace nackguard::metrics {
namespace {

bool has_line(const std::string& page, const std::string& line) {
  return page.find("\n" + line + "\n") != std::string::npos;
}

std::size_t count_of(const std::string& page, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = page.find(needle); at != std::string::npos; at = page.find(needle, at + 1)) ++n;
  return n;
}

TEST(RegistryAddresses, OneSeriesPerAddressInTheConfiguredOrder) {
  Registry registry({.upstream_addresses = {"c:3", "a:1", "[::1]:2"}});
  const std::string page = registry.render();
  const auto c = page.find("nackguard_upstream_connections{address=\"c:3\"} 0");
  const auto a = page.find("nackguard_upstream_connections{address=\"a:1\"} 0");
  const auto v6 = page.find("nackguard_upstream_connections{address=\"[::1]:2\"} 0");
  ASSERT_NE(c, std::string::npos);
  ASSERT_NE(a, std::string::npos);
  ASSERT_NE(v6, std::string::npos);
  EXPECT_LT(c, a);
  EXPECT_LT(a, v6);
  EXPECT_EQ(count_of(page, "nackguard_upstream_connections{"), 3u);
  EXPECT_EQ(count_of(page, "nackguard_upstream_connect_failures_total{"), 3u);
}

TEST(RegistryAddresses, TheGaugeFollowsConnectsAndDisconnects) {
  Registry registry({.upstream_addresses = {"a:1", "b:2"}});
  registry.upstream_connected(0);
  registry.upstream_connected(0);
  registry.upstream_connected(1);
  registry.upstream_disconnected(0);
  const std::string page = registry.render();
  EXPECT_TRUE(has_line(page, "nackguard_upstream_connections{address=\"a:1\"} 1"));
  EXPECT_TRUE(has_line(page, "nackguard_upstream_connections{address=\"b:2\"} 1"));
  registry.upstream_disconnected(0);
  registry.upstream_disconnected(1);
  EXPECT_TRUE(has_line(registry.render(), "nackguard_upstream_connections{address=\"a:1\"} 0"));
  EXPECT_TRUE(has_line(registry.render(), "nackguard_upstream_connections{address=\"b:2\"} 0"));
}

TEST(RegistryAddresses, FailuresAreCountedPerAddress) {
  Registry registry({.upstream_addresses = {"a:1", "b:2"}});
  registry.upstream_connect_failed(1);
  registry.upstream_connect_failed(1);
  registry.upstream_connect_failed(0);
  const std::string page = registry.render();
  EXPECT_TRUE(has_line(page, "nackguard_upstream_connect_failures_total{address=\"a:1\"} 1"));
  EXPECT_TRUE(has_line(page, "nackguard_upstream_connect_failures_total{address=\"b:2\"} 2"));
  EXPECT_TRUE(has_line(page, "nackguard_upstream_unavailable_total 0"));
}

TEST(RegistryAddresses, AnIndexOutsideTheListAddsNoSeries) {
  Registry registry({.upstream_addresses = {"a:1"}});
  registry.upstream_connect_failed(1);
  registry.upstream_connected(5);
  registry.upstream_disconnected(5);
  const std::string page = registry.render();
  EXPECT_EQ(count_of(page, "nackguard_upstream_connect_failures_total{"), 1u);
  EXPECT_TRUE(has_line(page, "nackguard_upstream_connect_failures_total{address=\"a:1\"} 0"));
  EXPECT_TRUE(has_line(page, "nackguard_upstream_connections{address=\"a:1\"} 0"));
}

TEST(RegistryAddresses, TheDefaultIsTheDefaultUpstream) {
  Registry registry;
  EXPECT_TRUE(has_line(registry.render(),
                       "nackguard_upstream_connect_failures_total{address=\"127.0.0.1:5672\"} 0"));
}

TEST(RegistryAddresses, AnEmptyListIsRefused) {
  EXPECT_THROW(Registry({.upstream_addresses = {}}), std::invalid_argument);
}

TEST(RegistryAddresses, ConcurrentConnectsAndDisconnectsBalance) {
  Registry registry({.upstream_addresses = {"a:1", "b:2"}});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&registry, t] {
      for (int i = 0; i < 10000; ++i) {
        registry.upstream_connected(t % 2);
        registry.upstream_disconnected(t % 2);
      }
      registry.upstream_connected(t % 2);
    });
  }
  for (auto& thread : threads) thread.join();
  const std::string page = registry.render();
  EXPECT_TRUE(has_line(page, "nackguard_upstream_connections{address=\"a:1\"} 2"));
  EXPECT_TRUE(has_line(page, "nackguard_upstream_connections{address=\"b:2\"} 2"));
}

}  // namespace
}  // namespace nackguard::metrics
