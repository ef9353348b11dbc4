#pragma once
// The spec's name of each AMQP 0-9-1 method ("basic.nack", "queue.declare-ok"), for messages,
// test output and the seed corpus's file names. The one table of method names: the seed
// capture, tests/fuzz/capture_corpus.py, reads method_name.cpp's `{method_key(C, M), "name"},`
// lines (one entry a line, in that exact shape, or the capture stops and names the file).

#include <cstdint>
#include <string>
#include <string_view>

namespace nackguard::amqp {

// The "class.method" name of a key for which is_spec_method() holds (RabbitMQ's extensions
// included), or an empty view for any other key.
std::string_view method_name(std::uint32_t key);

// method_name(key), or "method C.M" with the ids of a key that has no name ("method 60.999").
std::string describe_method(std::uint32_t key);

}  // namespace nackguard::amqp
