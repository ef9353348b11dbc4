#pragma once
// The properties every decoder must keep for ANY input. The fuzz targets (tests/fuzz/) abort
// when one breaks; corpus_replay_test.cpp runs the same checks over every seed file, so a
// regression seed keeps being checked by the ordinary unit build.
//
// Each check returns what it found: `broken` names the first property that does not hold
// (empty when all hold); `decoded` says whether the input decoded without error.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "amqp/all_methods.hpp"
#include "proxy/amqp/frame.hpp"
#include "proxy/amqp/method_codec.hpp"
#include "proxy/amqp/properties.hpp"
#include "proxy/amqp/table.hpp"

namespace nackguard::amqp::test {

struct CheckResult {
  bool decoded = false;
  std::string broken;
};

// A value re-encoded from a decode must be the bytes it was decoded from, with one exception:
// a 't' field reads any non-zero octet as true and writes true as 01 (RabbitMQ reads booleans
// the same way, and the proxy forwards original bytes, so both are accepted).
inline bool same_bytes_up_to_booleans(ByteView original, ByteView reencoded) {
  if (original.size() != reencoded.size()) return false;
  for (std::size_t i = 0; i < original.size(); ++i) {
    if (original[i] == reencoded[i]) continue;
    bool normalised_boolean = i > 0 && original[i - 1] == 't' && reencoded[i - 1] == 't' &&
                              original[i] > 1 && reencoded[i] == 1;
    if (!normalised_boolean) return false;
  }
  return true;
}

namespace detail {

// A decode result, with the frame's place in the stream instead of a copy of its bytes:
// check_frame() has tied the bytes to that place.
struct FrameEvent {
  FrameResult::Status status;
  FrameError error;
  std::uint8_t type;
  std::uint16_t channel;
  std::size_t offset;  // in the whole stream
  std::size_t size;    // of the whole frame
  bool operator==(const FrameEvent&) const = default;
};

// Properties of one decoded frame, relative to the buffer it was decoded from.
inline std::string check_frame(const Frame& frame, ByteView buffer, std::uint32_t frame_max) {
  if (frame.raw.data() != buffer.data()) return "frame.raw does not start at the buffer start";
  if (frame.raw.size() != frame.payload.size() + kFrameOverhead) {
    return "frame.raw.size() != payload + 8";
  }
  if (frame.raw.size() > buffer.size()) return "frame.raw extends past the input";
  if (frame.raw.size() > frame_max) return "frame larger than frame_max accepted";
  if (frame.payload.data() != frame.raw.data() + kFrameHeaderSize) return "payload misplaced";
  if (frame.raw.back() != kFrameEnd) return "frame accepted without its end octet";
  Bytes again;
  append_frame(again, frame.frame_type(), frame.channel, frame.payload);
  if (!std::equal(again.begin(), again.end(), frame.raw.begin(), frame.raw.end())) {
    return "append_frame() of a decoded frame differs from its raw bytes";
  }
  return {};
}

inline FrameEvent event_of(const FrameResult& result, std::size_t offset) {
  FrameEvent event{result.status, result.error, 0, 0, offset, 0};
  if (result.status == FrameResult::Status::frame) {
    event.type = result.frame.type;
    event.channel = result.frame.channel;
    event.size = result.frame.raw.size();
  }
  return event;
}

// Decodes `stream` as a connection would: the bytes arrive in two reads, split at `split`,
// and each decoded frame is consumed from the front of the buffer.
inline std::string decode_in_two_reads(ByteView stream, std::size_t split, std::uint32_t frame_max,
                                       std::vector<FrameEvent>& events) {
  FrameDecoder decoder(frame_max);
  Bytes buffer(stream.begin(), stream.begin() + static_cast<std::ptrdiff_t>(split));
  std::size_t consumed = 0;  // an offset, not an erase per frame: inputs hold thousands of frames
  std::size_t dropped = 0;   // bytes erased from the buffer's front
  bool all_read = split == stream.size();
  for (;;) {
    ByteView unread = ByteView(buffer).subspan(consumed);
    FrameResult result = decoder.decode(unread);
    if (result.status == FrameResult::Status::need_more) {
      if (result.frame.raw.size() != 0) return "need_more with a frame";
      if (all_read) {
        events.push_back(event_of(result, dropped + consumed));
        return {};
      }
      buffer.erase(buffer.begin(), buffer.begin() + static_cast<std::ptrdiff_t>(consumed));
      dropped += consumed;
      consumed = 0;
      buffer.insert(buffer.end(), stream.begin() + static_cast<std::ptrdiff_t>(split),
                    stream.end());
      all_read = true;
      continue;
    }
    events.push_back(event_of(result, dropped + consumed));
    if (result.status == FrameResult::Status::error) {
      if (result.error == FrameError::none) return "error status without an error";
      return {};
    }
    if (auto broken = check_frame(result.frame, unread, frame_max); !broken.empty()) {
      return broken;
    }
    consumed += result.frame.raw.size();
  }
}

}  // namespace detail

// `input` is a byte stream, optionally starting with the protocol header. Its frames are
// decoded once from the whole stream and once as two reads split at a point taken from the
// first byte; both must give the same frames, errors and final "need more".
inline CheckResult check_frame_stream(ByteView input) {
  CheckResult result;
  ByteView stream = input;
  if (check_protocol_header(input) == HeaderCheck::ok) stream = input.subspan(kProtocolHeaderSize);
  std::size_t split = input.empty() ? 0 : (stream.size() * input[0]) / 256;

  // RabbitMQ's default frame_max, and the spec minimum that every peer must accept.
  for (std::uint32_t frame_max : {std::uint32_t{131072}, kFrameMinSize}) {
    std::vector<detail::FrameEvent> whole, in_two;
    result.broken = detail::decode_in_two_reads(stream, stream.size(), frame_max, whole);
    if (result.broken.empty()) {
      result.broken = detail::decode_in_two_reads(stream, split, frame_max, in_two);
    }
    if (!result.broken.empty()) return result;
    if (whole != in_two) {
      result.broken = "frames decoded in two reads differ from the same bytes in one read";
      return result;
    }
    if (frame_max == 131072) {
      // Decoded: at least one frame, no error, and every byte used.
      std::size_t frames = 0, used = 0;
      bool error = false;
      for (const auto& event : whole) {
        if (event.status == FrameResult::Status::error) error = true;
        if (event.status != FrameResult::Status::frame) continue;
        ++frames;
        used += event.size;
      }
      result.decoded = frames > 0 && !error && used == stream.size();
    }
  }
  return result;
}

// `payload` is a method frame's payload. It is decoded as every method struct; at most one
// may accept it, and the one that does must survive encode -> decode unchanged.
inline CheckResult check_methods(ByteView payload) {
  CheckResult result;
  std::optional<std::uint32_t> key = peek_method_key(payload);
  AllMethods<TypeList>::for_each([&]<typename M>() {
    if (!result.broken.empty()) return;
    M method;
    MethodError error = decode_method(payload, method);
    if (!key) {
      if (error != MethodError::truncated) result.broken = "a payload without a key not truncated";
      return;
    }
    if (error == MethodError::wrong_method) {
      if (key == M::kKey) result.broken = "wrong_method for the method's own key";
      return;
    }
    if (key != M::kKey) {
      result.broken = "a method decoded a payload carrying another key";
      return;
    }
    if (error != MethodError::none) return;
    if (result.decoded) {
      result.broken = "two method structs accepted the same payload";
      return;
    }
    result.decoded = true;
    Bytes encoded;
    if (!encode_method(encoded, method)) {
      result.broken = "a decoded method does not encode";
      return;
    }
    M again;
    if (decode_method(encoded, again) != MethodError::none) {
      result.broken = "a re-encoded method does not decode";
      return;
    }
    if (FieldSnapshot::of(again) != FieldSnapshot::of(method)) {
      result.broken = "a method differs after encode -> decode";
      return;
    }
    Bytes encoded_again;
    if (!encode_method(encoded_again, again) || encoded_again != encoded) {
      result.broken = "encode(decode(encode(m))) != encode(m)";
    }
  });
  return result;
}

// `input` starts with a field table (its 32-bit length first); the bytes after it are not
// part of it. Decoded as a table and, separately, as an array; whatever decodes must encode
// back to exactly the bytes it consumed.
inline CheckResult check_field_table(ByteView input) {
  CheckResult result;
  {
    ByteReader reader(input);
    FieldTable table;
    if (decode_table(reader, table) == TableError::none) {
      result.decoded = true;
      ByteView consumed = input.first(reader.position());
      Bytes encoded;
      ByteWriter writer(encoded);
      if (!encode_table(writer, table)) {
        result.broken = "a decoded table does not encode";
      } else if (!same_bytes_up_to_booleans(consumed, encoded)) {
        result.broken = "a decoded table encodes to other bytes";
      } else {
        ByteReader again_reader(encoded);
        FieldTable again;
        Bytes encoded_again;
        ByteWriter writer_again(encoded_again);
        if (decode_table(again_reader, again) != TableError::none || !again_reader.at_end() ||
            !encode_table(writer_again, again) || encoded_again != encoded) {
          result.broken = "a re-encoded table does not decode to the same table";
        }
      }
    }
  }
  if (!result.broken.empty()) return result;
  {
    ByteReader reader(input);
    FieldArray array;
    if (decode_array(reader, array) == TableError::none) {
      ByteView consumed = input.first(reader.position());
      // Arrays have no encoder of their own: encode {"": A array} and skip the table's
      // length (4), the empty name (1) and the letter 'A' (1).
      FieldTable holder;
      holder.set("", FieldValue::array(std::move(array)));
      Bytes encoded;
      ByteWriter writer(encoded);
      if (!encode_table(writer, holder)) {
        result.broken = "a decoded array does not encode";
      } else if (!same_bytes_up_to_booleans(consumed, ByteView(encoded).subspan(6))) {
        result.broken = "a decoded array encodes to other bytes";
      }
    }
  }
  return result;
}

// `payload` is a content header frame's payload; when it decodes it must encode back to the
// same bytes, and peek_body_size() must agree with the decoded body size.
inline CheckResult check_content_header(ByteView payload) {
  CheckResult result;
  std::optional<std::uint64_t> peeked = peek_body_size(payload);
  if (peeked.has_value() != (payload.size() >= 12)) {
    result.broken = "peek_body_size() disagrees with the payload length";
    return result;
  }
  ContentHeader header;
  if (decode_content_header(payload, header) != HeaderError::none) return result;
  result.decoded = true;
  if (peeked != header.body_size) {
    result.broken = "peek_body_size() != decoded body_size";
    return result;
  }
  Bytes encoded;
  ByteWriter writer(encoded);
  if (!encode_content_header(writer, header)) {
    result.broken = "a decoded content header does not encode";
  } else if (!same_bytes_up_to_booleans(payload, encoded)) {
    result.broken = "a decoded content header encodes to other bytes";
  } else {
    ContentHeader again;
    Bytes encoded_again;
    ByteWriter writer_again(encoded_again);
    if (decode_content_header(encoded, again) != HeaderError::none ||
        !encode_content_header(writer_again, again) || encoded_again != encoded) {
      result.broken = "a re-encoded content header does not decode to the same header";
    }
  }
  return result;
}

}  // namespace nackguard::amqp::test
