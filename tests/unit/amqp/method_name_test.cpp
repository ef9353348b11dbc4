// The codec's names of methods (amqp::method_name): one for every spec method, each its own,
// and a key outside the spec named by its ids.

#include "proxy/amqp/method_name.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "proxy/amqp/constants.hpp"

namespace nackguard::amqp {
namespace {

// Class and method ids both below 256 cover every class of the spec and RabbitMQ's.
TEST(MethodName, EverySpecMethodHasADistinctNameAndNoOtherKeyHasOne) {
  std::set<std::string_view> names;
  int spec_methods = 0;
  for (std::uint32_t class_id = 0; class_id < 256; ++class_id) {
    for (std::uint32_t method_id = 0; method_id < 256; ++method_id) {
      const std::uint32_t key = method_key(class_id, method_id);
      const std::string_view name = method_name(key);
      if (!is_spec_method(key)) {
        EXPECT_TRUE(name.empty()) << class_id << "." << method_id << " is named " << name;
        continue;
      }
      ++spec_methods;
      EXPECT_FALSE(name.empty()) << class_id << "." << method_id;
      EXPECT_TRUE(names.insert(name).second) << name << " names two methods";
    }
  }
  EXPECT_EQ(spec_methods, 66);
}

TEST(MethodName, NamesAreTheSpecsClassDotMethod) {
  EXPECT_EQ(method_name(mid::basic_nack), "basic.nack");
  EXPECT_EQ(method_name(mid::queue_declare_ok), "queue.declare-ok");
  EXPECT_EQ(method_name(mid::basic_recover_async), "basic.recover-async");
  EXPECT_EQ(method_name(method_key(10, 71)), "connection.update-secret-ok");
  EXPECT_EQ(method_name(method_key(40, 51)), "exchange.unbind-ok");
  EXPECT_EQ(method_name(method_key(90, 31)), "tx.rollback-ok");
}

TEST(MethodName, AKeyOutsideTheSpecIsDescribedByItsIds) {
  EXPECT_EQ(method_name(method_key(60, 999)), "");
  EXPECT_EQ(describe_method(method_key(60, 999)), "method 60.999");
  EXPECT_EQ(describe_method(method_key(65535, 65535)), "method 65535.65535");
  EXPECT_EQ(describe_method(method_key(0, 0)), "method 0.0");
  EXPECT_EQ(describe_method(mid::basic_nack), "basic.nack");
}

}  // namespace
}  // namespace nackguard::amqp
