// x-nackguard-consumer: the client's name from its properties, and the bound on the label.

#include "proxy/session/consumer_label.hpp"

#include <gtest/gtest.h>

#include <string>

namespace nackguard::session {
namespace {

using amqp::FieldTable;
using amqp::FieldValue;

FieldTable properties(std::initializer_list<std::pair<const char*, FieldValue>> entries) {
  FieldTable table;
  for (const auto& [name, value] : entries) table.set(name, value);
  return table;
}

TEST(ClientName, ConnectionNameComesFirst) {
  EXPECT_EQ(client_name(properties({{"product", FieldValue::string("pika")},
                                    {"version", FieldValue::string("1.3.2")},
                                    {"connection_name", FieldValue::string("orders-worker")}})),
            "orders-worker");
}

TEST(ClientName, ElseProductAndVersion) {
  EXPECT_EQ(client_name(properties({{"product", FieldValue::string("pika")},
                                    {"version", FieldValue::string("1.3.2")}})),
            "pika 1.3.2");
  EXPECT_EQ(client_name(properties({{"product", FieldValue::string("pika")}})), "pika");
  EXPECT_EQ(client_name(properties({{"version", FieldValue::string("1.3.2")}})), "1.3.2");
  // An empty connection_name names nothing.
  EXPECT_EQ(client_name(properties({{"connection_name", FieldValue::string("")},
                                    {"product", FieldValue::string("amqplib")}})),
            "amqplib");
}

TEST(ClientName, NothingOrNoStringsIsEmpty) {
  EXPECT_EQ(client_name(FieldTable{}), "");
  EXPECT_EQ(client_name(properties({{"connection_name", FieldValue::i64(7)},
                                    {"product", FieldValue::table(FieldTable{})}})),
            "");
}

TEST(ClientName, TenKibNameIsCutTo255Bytes) {
  std::string name(10 * 1024, 'n');
  EXPECT_EQ(client_name(properties({{"connection_name", FieldValue::string(name)}})),
            std::string(255, 'n'));
}

TEST(ConsumerLabel, ClientOnHost) {
  EXPECT_EQ(consumer_label("orders-worker", "orders-7d9f-abcde"),
            "orders-worker on orders-7d9f-abcde");
  EXPECT_EQ(consumer_label("", "pod-1"), "unknown client on pod-1");
  EXPECT_EQ(consumer_label("pika 1.3.2", ""), "pika 1.3.2");
}

TEST(ConsumerLabel, LongClientIsCutSoThatTheHostStays) {
  std::string label = consumer_label(std::string(300, 'c'), "pod-1");
  EXPECT_EQ(label.size(), 255u);
  EXPECT_EQ(label, std::string(255 - 9, 'c') + " on pod-1");
  // A host that is itself too long takes at most half.
  label = consumer_label(std::string(300, 'c'), std::string(300, 'h'));
  EXPECT_EQ(label.size(), 255u);
  EXPECT_EQ(label.substr(label.size() - 127), std::string(127, 'h'));
}

TEST(ConsumerLabel, CutsNeverSplitAUtf8Character) {
  // "é" is two bytes: 200 of them are 400 bytes; a cut at an odd count would split one.
  std::string accents;
  for (int i = 0; i < 200; ++i) accents += "\xC3\xA9";
  std::string name = client_name(properties({{"connection_name", FieldValue::string(accents)}}));
  EXPECT_EQ(name.size(), 254u);
  EXPECT_EQ(name, accents.substr(0, 254));
  std::string label = consumer_label(accents, "pod-12");  // 255 - 10 = 245 bytes of room
  EXPECT_EQ(label, accents.substr(0, 244) + " on pod-12");
  EXPECT_EQ(cut_utf8("\xE2\x82\xAC", 2), "");  // a 3-byte euro sign does not fit in 2
  EXPECT_EQ(cut_utf8("ab", 5), "ab");
}

}  // namespace
}  // namespace nackguard::session
