// Which (class, method) ids are AMQP 0-9-1's (amqp::is_spec_method), and the encoders that
// cannot fail: a close's reply text is cut to fit, never refused.

#include <gtest/gtest.h>

#include <string>

#include "amqp/all_methods.hpp"
#include "proxy/amqp/method_codec.hpp"

namespace nackguard::amqp {
namespace {

TEST(SpecMethods, EveryMethodTheCodecHasIsASpecMethod) {
  test::AllMethods<test::TypeList>::for_each(
      [&]<typename M>() { EXPECT_TRUE(is_spec_method(M::kKey)) << (M::kKey >> 16); });
}

TEST(SpecMethods, TheMethodsTheCodecPassesThroughAreSpecMethodsToo) {
  const std::uint32_t passed[] = {
      method_key(10, 20), method_key(10, 21), method_key(10, 70),
      method_key(10, 71),                      // secure, update-secret
      method_key(30, 10), method_key(30, 11),  // access.request
      method_key(40, 10), method_key(40, 11), method_key(40, 20),
      method_key(40, 21),  // exchange
      method_key(40, 30), method_key(40, 31), method_key(40, 40),
      method_key(40, 51), method_key(50, 20), method_key(50, 21),
      method_key(50, 30), method_key(50, 31),  // queue
      method_key(50, 40), method_key(50, 41), method_key(50, 50),
      method_key(50, 51), method_key(90, 10), method_key(90, 11),
      method_key(90, 20), method_key(90, 21),  // tx
      method_key(90, 30), method_key(90, 31),
  };
  for (std::uint32_t key : passed) {
    EXPECT_TRUE(is_spec_method(key)) << (key >> 16) << "." << (key & 0xFFFF);
  }
}

TEST(SpecMethods, IdsOutsideTheSpecAreUnknown) {
  const std::uint32_t unknown[] = {
      method_key(0, 0),    method_key(10, 12),  method_key(10, 52),  method_key(20, 30),
      method_key(40, 41),  method_key(40, 50),  method_key(50, 12),  method_key(60, 41),
      method_key(60, 999), method_key(60, 121), method_key(85, 12),  method_key(90, 40),
      method_key(70, 10),  method_key(80, 10),  method_key(100, 10), method_key(65535, 65535),
  };
  for (std::uint32_t key : unknown) {
    EXPECT_FALSE(is_spec_method(key)) << (key >> 16) << "." << (key & 0xFFFF);
  }
}

TEST(CloseFrames, AReplyTextOver255BytesIsCutAtACharacterBoundary) {
  ConnectionClose close;
  close.reply_code = 540;
  // 'a' then 2-byte characters: byte 255 is the middle of one, which is left out whole.
  close.reply_text = "a";
  for (int i = 0; i < 200; ++i) close.reply_text += "\xC3\xA9";
  close.class_id = 60;
  close.method_id = 999;
  Bytes out;
  append_close_frame(out, 0, close);
  FrameResult frame = FrameDecoder(1u << 20).decode(out);
  ASSERT_EQ(frame.status, FrameResult::Status::frame);
  EXPECT_EQ(frame.frame.raw.size(), out.size());
  ConnectionClose decoded;
  ASSERT_EQ(decode_method(frame.frame.payload, decoded), MethodError::none);
  EXPECT_EQ(decoded.reply_text.size(), 255u);
  EXPECT_EQ(decoded.reply_text, close.reply_text.substr(0, 255));
  EXPECT_EQ(decoded.class_id, 60);
  EXPECT_EQ(decoded.method_id, 999);

  close.reply_text = "a" + std::string(300, 'b');
  out.clear();
  append_close_frame(out, 0, close);
  frame = FrameDecoder(1u << 20).decode(out);
  ASSERT_EQ(frame.status, FrameResult::Status::frame);
  ASSERT_EQ(decode_method(frame.frame.payload, decoded), MethodError::none);
  EXPECT_EQ(decoded.reply_text, close.reply_text.substr(0, 255));
}

TEST(Encoders, AFailedMethodFrameAppendsNothing) {
  Bytes out = {1, 2, 3};
  QueueDeclare declare;
  declare.queue = std::string(256, 'q');
  EXPECT_FALSE(append_method_frame(out, 1, declare));
  EXPECT_EQ(out, (Bytes{1, 2, 3}));
  declare.queue = std::string(255, 'q');
  EXPECT_TRUE(append_method_frame(out, 1, declare));
  EXPECT_GT(out.size(), 3u + 255u);
}

TEST(Encoders, AFailedContentHeaderFrameAppendsNothing) {
  Bytes out = {7};
  ContentHeader header;
  header.properties.message_id = std::string(256, 'm');
  EXPECT_FALSE(append_content_header_frame(out, 1, header));
  EXPECT_EQ(out, Bytes{7});
}

}  // namespace
}  // namespace nackguard::amqp
