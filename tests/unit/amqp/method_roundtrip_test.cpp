// Every method struct of methods.hpp, typed over the whole list: encode -> decode gives equal
// fields, every strict prefix is truncated, trailing bytes and other keys are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "amqp/all_methods.hpp"
#include "amqp/codec_test_support.hpp"
#include "proxy/amqp/method_codec.hpp"
#include "proxy/amqp/method_name.hpp"

namespace nackguard::amqp {
namespace {

using test::as_hex;
using test::cat;
using test::FieldFiller;
using test::FieldSnapshot;
using test::FillPattern;
using test::hex;

constexpr FillPattern kPatterns[] = {FillPattern::zeros, FillPattern::ones, FillPattern::mixed};

const char* pattern_name(FillPattern pattern) {
  switch (pattern) {
    case FillPattern::zeros:
      return "zeros";
    case FillPattern::ones:
      return "ones";
    case FillPattern::mixed:
      return "mixed";
  }
  return "?";
}

template <typename M>
Bytes encoded(const M& method) {
  Bytes out;
  EXPECT_TRUE(encode_method(out, method));
  return out;
}

// ---- every method: typed over the whole list ----

template <typename M>
class EveryMethod : public ::testing::Test {};

struct MethodTypeName {
  template <typename M>
  static std::string GetName(int) {
    std::string name(method_name(M::kKey));
    std::replace_if(
        name.begin(), name.end(), [](char c) { return c == '.' || c == '-'; }, '_');
    return name;
  }
};

using MethodTypes = test::AllMethods<::testing::Types>;
TYPED_TEST_SUITE(EveryMethod, MethodTypes, MethodTypeName);

TYPED_TEST(EveryMethod, EncodeThenDecodeGivesEqualFields) {
  for (FillPattern pattern : kPatterns) {
    SCOPED_TRACE(pattern_name(pattern));
    TypeParam original = FieldFiller::make<TypeParam>(pattern);
    Bytes wire = encoded(original);
    TypeParam decoded;
    ASSERT_EQ(decode_method(wire, decoded), MethodError::none);
    EXPECT_EQ(FieldSnapshot::of(decoded), FieldSnapshot::of(original));
    EXPECT_EQ(as_hex(encoded(decoded)), as_hex(wire));
  }
}

TYPED_TEST(EveryMethod, PayloadStartsWithItsClassAndMethodIds) {
  Bytes wire = encoded(TypeParam{});
  ASSERT_GE(wire.size(), 4u);
  EXPECT_EQ(wire[0] << 8 | wire[1], static_cast<int>(TypeParam::kKey >> 16));
  EXPECT_EQ(wire[2] << 8 | wire[3], static_cast<int>(TypeParam::kKey & 0xFFFF));
  EXPECT_EQ(peek_method_key(wire), TypeParam::kKey);
}

TYPED_TEST(EveryMethod, EveryStrictPrefixIsTruncated) {
  for (FillPattern pattern : kPatterns) {
    SCOPED_TRACE(pattern_name(pattern));
    Bytes wire = encoded(FieldFiller::make<TypeParam>(pattern));
    for (std::size_t n = 0; n < wire.size(); ++n) {
      TypeParam decoded;
      ASSERT_EQ(decode_method(ByteView(wire).first(n), decoded), MethodError::truncated)
          << "prefix of " << n << " of " << wire.size();
    }
  }
}

TYPED_TEST(EveryMethod, TrailingBytesAreRefused) {
  for (FillPattern pattern : kPatterns) {
    SCOPED_TRACE(pattern_name(pattern));
    Bytes wire = cat({encoded(FieldFiller::make<TypeParam>(pattern)), hex("00")});
    TypeParam decoded;
    EXPECT_EQ(decode_method(wire, decoded), MethodError::trailing_bytes);
  }
}

TYPED_TEST(EveryMethod, AnotherMethodIdIsWrongMethod) {
  Bytes wire = encoded(FieldFiller::make<TypeParam>(FillPattern::mixed));
  TypeParam decoded;
  Bytes other_method = wire;
  other_method[3] ^= 0x80;
  EXPECT_EQ(decode_method(other_method, decoded), MethodError::wrong_method);
  Bytes other_class = wire;
  other_class[1] ^= 0x80;
  EXPECT_EQ(decode_method(other_class, decoded), MethodError::wrong_method);
  // The key is judged before the fields, so a bare key is enough to be refused.
  EXPECT_EQ(decode_method(hex("ff ff ff ff"), decoded), MethodError::wrong_method);
}

// Decoding into a struct that held another method leaves nothing of it behind (tables
// included: they are replaced, not appended to).
TYPED_TEST(EveryMethod, DecodeReplacesWhatTheOutputHeld) {
  TypeParam expected = FieldFiller::make<TypeParam>(FillPattern::mixed);
  TypeParam decoded = FieldFiller::make<TypeParam>(FillPattern::ones);
  ASSERT_EQ(decode_method(encoded(expected), decoded), MethodError::none);
  EXPECT_EQ(FieldSnapshot::of(decoded), FieldSnapshot::of(expected));
}

TYPED_TEST(EveryMethod, AppendMethodFrameWrapsThePayload) {
  TypeParam method = FieldFiller::make<TypeParam>(FillPattern::mixed);
  Bytes out = hex("aa");
  ASSERT_TRUE(append_method_frame(out, 7, method));
  ASSERT_EQ(out[0], 0xaa);
  FrameResult result = FrameDecoder(131072).decode(ByteView(out).subspan(1));
  ASSERT_EQ(result.status, FrameResult::Status::frame);
  EXPECT_EQ(result.frame.frame_type(), FrameType::method);
  EXPECT_EQ(result.frame.channel, 7);
  EXPECT_EQ(result.frame.raw.size(), out.size() - 1);
  EXPECT_EQ(as_hex(result.frame.payload), as_hex(encoded(method)));
}

// A struct added to methods.hpp must be added to the list too, or it goes untested.
TEST(MethodList, HasEveryStructOfMethodsHpp) {
  std::ifstream file(NACKGUARD_SOURCE_DIR "/proxy/amqp/methods.hpp");
  ASSERT_TRUE(file) << "cannot read methods.hpp";
  std::stringstream text;
  text << file.rdbuf();
  std::string source = text.str();
  std::size_t structs = 0;
  for (std::size_t at = source.find("kKey = mid::"); at != std::string::npos;
       at = source.find("kKey = mid::", at + 1)) {
    ++structs;
  }
  EXPECT_EQ(test::AllMethods<test::TypeList>::size, structs);
}

TEST(MethodList, NamesEveryMethodOnce) {
  std::vector<std::uint32_t> keys;
  test::AllMethods<test::TypeList>::for_each([&]<typename M>() { keys.push_back(M::kKey); });
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(std::adjacent_find(keys.begin(), keys.end()), keys.end()) << "a method twice";
  for (std::uint32_t key : keys) EXPECT_FALSE(method_name(key).empty()) << key;
}

}  // namespace
}  // namespace nackguard::amqp
