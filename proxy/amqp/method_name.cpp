#include "proxy/amqp/method_name.hpp"

#include "proxy/amqp/constants.hpp"

namespace nackguard::amqp {

namespace {

struct Named {
  std::uint32_t key;
  std::string_view name;
};

// Every key of is_spec_method(), in its order; method_name_test.cpp checks the two agree.
constexpr Named kNames[] = {
    {method_key(10, 10), "connection.start"},
    {method_key(10, 11), "connection.start-ok"},
    {method_key(10, 20), "connection.secure"},
    {method_key(10, 21), "connection.secure-ok"},
    {method_key(10, 30), "connection.tune"},
    {method_key(10, 31), "connection.tune-ok"},
    {method_key(10, 40), "connection.open"},
    {method_key(10, 41), "connection.open-ok"},
    {method_key(10, 50), "connection.close"},
    {method_key(10, 51), "connection.close-ok"},
    {method_key(10, 60), "connection.blocked"},
    {method_key(10, 61), "connection.unblocked"},
    {method_key(10, 70), "connection.update-secret"},
    {method_key(10, 71), "connection.update-secret-ok"},
    {method_key(20, 10), "channel.open"},
    {method_key(20, 11), "channel.open-ok"},
    {method_key(20, 20), "channel.flow"},
    {method_key(20, 21), "channel.flow-ok"},
    {method_key(20, 40), "channel.close"},
    {method_key(20, 41), "channel.close-ok"},
    {method_key(30, 10), "access.request"},
    {method_key(30, 11), "access.request-ok"},
    {method_key(40, 10), "exchange.declare"},
    {method_key(40, 11), "exchange.declare-ok"},
    {method_key(40, 20), "exchange.delete"},
    {method_key(40, 21), "exchange.delete-ok"},
    {method_key(40, 30), "exchange.bind"},
    {method_key(40, 31), "exchange.bind-ok"},
    {method_key(40, 40), "exchange.unbind"},
    {method_key(40, 51), "exchange.unbind-ok"},
    {method_key(50, 10), "queue.declare"},
    {method_key(50, 11), "queue.declare-ok"},
    {method_key(50, 20), "queue.bind"},
    {method_key(50, 21), "queue.bind-ok"},
    {method_key(50, 30), "queue.purge"},
    {method_key(50, 31), "queue.purge-ok"},
    {method_key(50, 40), "queue.delete"},
    {method_key(50, 41), "queue.delete-ok"},
    {method_key(50, 50), "queue.unbind"},
    {method_key(50, 51), "queue.unbind-ok"},
    {method_key(60, 10), "basic.qos"},
    {method_key(60, 11), "basic.qos-ok"},
    {method_key(60, 20), "basic.consume"},
    {method_key(60, 21), "basic.consume-ok"},
    {method_key(60, 30), "basic.cancel"},
    {method_key(60, 31), "basic.cancel-ok"},
    {method_key(60, 40), "basic.publish"},
    {method_key(60, 50), "basic.return"},
    {method_key(60, 60), "basic.deliver"},
    {method_key(60, 70), "basic.get"},
    {method_key(60, 71), "basic.get-ok"},
    {method_key(60, 72), "basic.get-empty"},
    {method_key(60, 80), "basic.ack"},
    {method_key(60, 90), "basic.reject"},
    {method_key(60, 100), "basic.recover-async"},
    {method_key(60, 110), "basic.recover"},
    {method_key(60, 111), "basic.recover-ok"},
    {method_key(60, 120), "basic.nack"},
    {method_key(85, 10), "confirm.select"},
    {method_key(85, 11), "confirm.select-ok"},
    {method_key(90, 10), "tx.select"},
    {method_key(90, 11), "tx.select-ok"},
    {method_key(90, 20), "tx.commit"},
    {method_key(90, 21), "tx.commit-ok"},
    {method_key(90, 30), "tx.rollback"},
    {method_key(90, 31), "tx.rollback-ok"},
};

}  // namespace

std::string_view method_name(std::uint32_t key) {
  for (const Named& named : kNames) {
    if (named.key == key) return named.name;
  }
  return {};
}

std::string describe_method(std::uint32_t key) {
  std::string_view name = method_name(key);
  if (!name.empty()) return std::string(name);
  return "method " + std::to_string(key >> 16) + "." + std::to_string(key & 0xFFFF);
}

}  // namespace nackguard::amqp
