#include "proxy/retry/policy_set.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace nackguard::retry {
namespace {

struct GlobCase {
  std::string_view pattern;
  std::string_view text;
  bool matches;
};

TEST(GlobMatch, Table) {
  const GlobCase cases[] = {
      {"", "", true},
      {"", "a", false},
      {"*", "", true},
      {"*", "anything.at.all", true},
      {"**", "x", true},
      {"orders", "orders", true},
      {"orders", "orders2", false},
      {"orders", "order", false},
      {"orders.*", "orders.eu", true},
      {"orders.*", "orders.", true},
      {"orders.*", "orders", false},
      {"orders.*", "ordersXeu", false},
      {"orders.eu.*", "orders.eu.de", true},
      {"orders.eu.*", "orders.us.de", false},
      {"?", "a", true},
      {"?", "", false},
      {"?", "ab", false},
      {"q?", "q1", true},
      {"q?", "q", false},
      {"q?", "q12", false},
      {"??.*", "eu.orders", true},
      {"??.*", "e.orders", false},
      {"*.dlq", "orders.dlq", true},
      {"*.dlq", "orders.dlq.x", false},
      {"*.dlq", ".dlq", true},
      {"a*b*c", "abc", true},
      {"a*b*c", "aXXbYYc", true},
      {"a*b*c", "aXXbYY", false},
      {"a*b*c", "acb", false},
      {"a*bc", "abcbc", true},  // the star must absorb the first "bc"
      {"*a", "aaaa", true},
      {"*?", "", false},
      {"*?", "x", true},
      {"?*?", "xy", true},
      {"?*?", "x", false},
      {"*x*", "abcxdef", true},
      {"*x*", "abcdef", false},
      {"Orders", "orders", false},  // case-sensitive, as RabbitMQ names are
  };
  for (const auto& c : cases) {
    EXPECT_EQ(glob_match(c.pattern, c.text), c.matches)
        << "pattern \"" << c.pattern << "\" text \"" << c.text << "\"";
  }
}

TEST(GlobMatch, PathologicalPatternStaysFast) {
  const std::string text(20'000, 'a');
  const std::string pattern = "*a*a*a*a*a*a*a*a*b";
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(glob_match(pattern, text));
  EXPECT_TRUE(glob_match("*a*a*a*a*a*a*a*a*", text));
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_LT(elapsed, std::chrono::seconds(1));
}

TEST(IsGlob, Wildcards) {
  EXPECT_FALSE(is_glob("orders"));
  EXPECT_FALSE(is_glob(""));
  EXPECT_TRUE(is_glob("*"));
  EXPECT_TRUE(is_glob("orders.*"));
  EXPECT_TRUE(is_glob("q?"));
}

Policy named(std::string queue, std::string source) {
  Policy policy;
  policy.queue = std::move(queue);
  policy.source = std::move(source);
  return policy;
}

struct PrecedenceCase {
  std::string_view queue;
  std::string_view expected_source;
};

TEST(PolicySet, Precedence) {
  // Deliberately listed least specific first.
  const PolicySet set({named("*", "star"), named("orders.*", "orders-glob"),
                       named("orders.eu.*", "orders-eu-glob"), named("orders.eu.de", "exact-de"),
                       named("*.dlq", "dlq-glob"), named("orders.e?.*", "orders-e?-glob"),
                       named("pay?", "pay?"), named("pay*", "pay*")});
  const PrecedenceCase cases[] = {
      {"orders.eu.de", "exact-de"},        // exact beats every glob
      {"orders.eu.fr", "orders-eu-glob"},  // "orders.eu." is the longest literal prefix
      {"orders.ex.fr", "orders-e?-glob"},  // prefix "orders.e" beats "orders."
      {"orders.us", "orders-glob"},        //
      {"orders.dlq", "orders-glob"},       // prefix "orders." beats "" of "*.dlq"
      {"billing.dlq", "dlq-glob"},         // more literal characters than "*"
      {"billing", "star"},                 //
      {"pay1", "pay?"},                    // equal prefix "pay": "pay?" has 3 literals, "pay*"
      {"payments", "pay*"},                //   too; given order decides, and only pay* matches
      {"", "star"},                        //
  };
  for (const auto& c : cases) {
    EXPECT_EQ(set.match(c.queue).source, c.expected_source) << "queue \"" << c.queue << "\"";
  }
  EXPECT_EQ(set.fallback().source, "star");
}

TEST(PolicySet, EqualPrefixAndLiteralsFallBackToGivenOrder) {
  const PolicySet first({named("q?x", "first"), named("q*x", "second")});
  EXPECT_EQ(first.match("qax").source, "first");
  const PolicySet swapped({named("q*x", "second"), named("q?x", "first")});
  EXPECT_EQ(swapped.match("qax").source, "second");
}

TEST(PolicySet, MoreLiteralsWinAtEqualPrefix) {
  const PolicySet set({named("a*", "short"), named("a*.dlq", "long")});
  EXPECT_EQ(set.match("a.b.dlq").source, "long");
  EXPECT_EQ(set.match("a.b").source, "short");
  EXPECT_EQ(set.policies().front().queue, "a*.dlq");
}

TEST(PolicySet, ExactNamesComeFirstInPolicies) {
  const PolicySet set({named("*", "star"), named("orders", "exact")});
  ASSERT_EQ(set.policies().size(), 2u);
  EXPECT_EQ(set.policies()[0].queue, "orders");
  EXPECT_EQ(set.policies()[1].queue, "*");
}

TEST(PolicySet, BuiltInDefaultWithoutStar) {
  const PolicySet empty;
  EXPECT_EQ(empty.match("anything").source, "built-in default");
  EXPECT_EQ(empty.fallback().source, "built-in default");
  Policy expected;
  expected.source = "built-in default";
  EXPECT_EQ(empty.match("anything"), expected);

  const PolicySet set({named("orders.*", "orders-glob")});
  EXPECT_EQ(set.match("orders.eu").source, "orders-glob");
  EXPECT_EQ(set.match("billing").source, "built-in default");
  EXPECT_EQ(set.fallback().source, "built-in default");
}

}  // namespace
}  // namespace nackguard::retry
