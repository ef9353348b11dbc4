#pragma once
// A content header read around a headers table the codec refuses (nested past
// TableLimits::max_depth, too many values, an unknown type letter), and a copy of it written
// without re-encoding that table. RabbitMQ accepts such a message, so the guard must still know
// it (message_id, correlation_id, the top-level headers, the body) and still be able to delay
// or dead-letter it with its properties intact.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "proxy/amqp/bytes.hpp"
#include "proxy/amqp/properties.hpp"
#include "proxy/amqp/table.hpp"

namespace nackguard::guard {

struct RawProperties {
  // Every property. When `opaque`, headers holds only the top-level entries that decode on
  // their own (a 10,000-deep entry is left out), in their order.
  amqp::ContentHeader header;
  bool opaque = false;  // the headers table as a whole did not decode
  // Where the table is in the payload (its length prefix included), and its top-level
  // entries (name, byte range in the payload). entries_known is false when an unknown type
  // letter stopped the walk: then the table can be kept only as it is.
  std::size_t table_at = 0;
  std::size_t table_end = 0;
  struct Entry {
    std::string name;
    std::size_t at = 0;
    std::size_t end = 0;
  };
  std::vector<Entry> entries;
  bool entries_known = false;
};

// Decodes a content header payload as the codec does. If the codec refuses only its headers
// table, reads the other properties around it and the table's top level (opaque = true).
// False if the header is malformed anywhere else.
bool decode_properties(amqp::ByteView payload, RawProperties& out);

// A header the proxy writes on a copy: it replaces a top-level header of the same name, or,
// with only_if_absent, is left out when the message has one. With remove, the header is taken
// out of the copy (`value` is unused).
struct HeaderEdit {
  std::string name;
  amqp::FieldValue value;
  bool only_if_absent = false;
  bool remove = false;
};

// The property flags and property list of a copy of an opaque header (`payload` is the one
// `props` was decoded from): the original bytes, with the top-level `edits` applied and every
// other top-level entry copied byte for byte. Without known entries the table is copied as it
// is and the edits are dropped. False if the result cannot be encoded.
[[nodiscard]] bool copy_properties(amqp::ByteView payload, const RawProperties& props,
                                   const std::vector<HeaderEdit>& edits, amqp::Bytes& out);

// Applies `edits` to a decoded table, as copy_properties does to raw bytes.
void apply_edits(amqp::FieldTable& table, const std::vector<HeaderEdit>& edits);

}  // namespace nackguard::guard
