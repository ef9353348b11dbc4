#pragma once
// The bridge between the project's codec and rabbitmq-c for message properties. A message is
// read as its raw property bytes (decoded by the codec, so the rewrite sees every field with its
// type letter) and published from rabbitmq-c's decoded form, built here from the codec's.
// Both use RabbitMQ's type letters, so what rabbitmq-c encodes is the same bytes the codec
// would (rabbitmq_properties_test checks this for every letter).

#include <amqp.h>

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "proxy/amqp/properties.hpp"

namespace nackguard::replay {

// rabbitmq-c's view of one BasicProperties. It points into `properties`, which must outlive
// it and stay unchanged.
class RabbitProperties {
 public:
  explicit RabbitProperties(const amqp::BasicProperties& properties);
  RabbitProperties(const RabbitProperties&) = delete;
  RabbitProperties& operator=(const RabbitProperties&) = delete;

  const amqp_basic_properties_t* get() const { return &decoded_; }

 private:
  amqp_table_t table(const amqp::FieldTable& table);
  amqp_array_t array(const amqp::FieldArray& array);
  amqp_field_value_t value(const amqp::FieldValue& value);

  amqp_basic_properties_t decoded_{};
  // Storage for the nested tables and arrays; a deque keeps earlier blocks in place.
  std::deque<std::vector<amqp_table_entry_t>> entries_;
  std::deque<std::vector<amqp_field_value_t>> values_;
};

// A content header from a header frame as rabbitmq-c hands it over: the class, the body size
// and the raw property bytes (flags and list). Returns the codec's error for bytes it refuses.
amqp::HeaderError decode_raw_header(std::uint16_t class_id, std::uint64_t body_size,
                                    amqp_bytes_t raw, amqp::ContentHeader& out);

}  // namespace nackguard::replay
