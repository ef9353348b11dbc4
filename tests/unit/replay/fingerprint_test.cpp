// A message's identity across trips: what a copy that comes back still shares with the copy.
#include "proxy/replay/fingerprint.hpp"

#include <gtest/gtest.h>

#include "proxy/replay/rewrite.hpp"

namespace nackguard::replay {
namespace {

using amqp::FieldValue;

amqp::ContentHeader header_with_id(std::string id) {
  amqp::ContentHeader header;
  header.properties.message_id = std::move(id);
  header.properties.headers.emplace();
  header.properties.headers->set("x-nackguard-returns", FieldValue::i64(6));
  return header;
}

const amqp::Bytes kBody = {'b', 'o', 'd', 'y'};

TEST(Fingerprint, TheReplayCountSetsACopyApartFromItsOriginal) {
  amqp::ContentHeader original = header_with_id("a");
  EXPECT_NE(fingerprint(original, kBody), fingerprint(replay_copy_header(original), kBody));
}

TEST(Fingerprint, SurvivesWhatDeadLetteringAgainChanges) {
  amqp::ContentHeader copy = replay_copy_header(header_with_id("a"));
  amqp::ContentHeader back = copy;
  back.properties.headers->set("x-nackguard-returns", FieldValue::i64(6));
  back.properties.headers->set("x-nackguard-reason", FieldValue::string("crash_loop"));
  back.properties.headers->set("x-death", FieldValue::array({}));
  back.properties.delivery_mode = 2;
  EXPECT_EQ(fingerprint(back, kBody), fingerprint(copy, kBody));
}

TEST(Fingerprint, FollowsTheIdentityAndTheBody) {
  amqp::ContentHeader a = header_with_id("a");
  EXPECT_NE(fingerprint(a, kBody), fingerprint(header_with_id("b"), kBody));
  amqp::Bytes other = kBody;
  other.push_back('!');
  EXPECT_NE(fingerprint(a, kBody), fingerprint(a, other));
  amqp::ContentHeader with_correlation = a;
  with_correlation.properties.correlation_id = "c";
  EXPECT_NE(fingerprint(a, kBody), fingerprint(with_correlation, kBody));
  amqp::ContentHeader with_timestamp = a;
  with_timestamp.properties.timestamp = 0;  // present but zero is not absent
  EXPECT_NE(fingerprint(a, kBody), fingerprint(with_timestamp, kBody));
}

TEST(Fingerprint, FieldsDoNotRunIntoEachOther) {
  amqp::ContentHeader ab;
  ab.properties.message_id = "ab";
  amqp::ContentHeader a;
  a.properties.message_id = "a";
  a.properties.correlation_id = "b";
  EXPECT_NE(fingerprint(ab, {}), fingerprint(a, {}));
}

}  // namespace
}  // namespace nackguard::replay
