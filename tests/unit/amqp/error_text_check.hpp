#pragma once
// The codec tests' check that each error of an enum has a text of its own (frame, header,
// method and table errors).

#include <gtest/gtest.h>

#include <initializer_list>

namespace nackguard::amqp::test {

// Every error in `all` has a text that is not empty, and no two of them share a text.
template <typename Error>
void expect_each_error_has_its_own_text(std::initializer_list<Error> all) {
  for (Error a : all) {
    EXPECT_FALSE(to_string(a).empty()) << "error " << static_cast<int>(a);
    for (Error b : all) {
      if (a != b) {
        EXPECT_NE(to_string(a), to_string(b));
      }
    }
  }
}

}  // namespace nackguard::amqp::test
