#pragma once
// What a replayed copy looks like, and what the replay reads from a dead-lettered message.
// Pure functions over the codec's types.

#include <cstdint>
#include <string>
#include <string_view>

#include "proxy/amqp/properties.hpp"

namespace nackguard::replay {

// The replay's own header; it reads the others nackguard writes (guard/header_names.hpp).
inline constexpr std::string_view kReplaysHeader = "x-nackguard-replays";
inline constexpr std::string_view kNoReason = "(no reason)";

// The header `name`, or nullptr when the message has no such header (or no headers).
const amqp::FieldValue* header_of(const amqp::BasicProperties& properties, std::string_view name);

// How often the message was replayed already: x-nackguard-replays as an integer of any width;
// 0 when it is absent, negative or not an integer.
std::int64_t replays_of(const amqp::BasicProperties& properties);

// x-nackguard-reason, printable on one line; kNoReason when absent or not a string.
std::string reason_of(const amqp::BasicProperties& properties);

// The message_id, printable on one line, or "(no message_id)".
std::string label_of(const amqp::BasicProperties& properties);

// The copy's content header: x-nackguard-returns, and the broker's x-delivery-count and
// x-acquired-count (RabbitMQ 4.3), removed, and
// x-nackguard-replays set to one more than before, as a long ('l'), in its old place or last.
// Every other property and header is left as it is; a headers table is added if there was none.
amqp::ContentHeader replay_copy_header(const amqp::ContentHeader& original);

// Replaces control characters, and cuts text longer than `max_bytes`, so that a value taken
// from a message cannot break a line of the report.
std::string printable(std::string_view text, std::size_t max_bytes = 200);

}  // namespace nackguard::replay
