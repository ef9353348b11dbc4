#pragma once
// The completion token of the Asio layer's coroutines: a co_await gives (error, result...) as
// a tuple, so that an error is a value to test rather than an exception.

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace nackguard::net {

inline constexpr auto kUseTuple = boost::asio::as_tuple(boost::asio::use_awaitable);

}  // namespace nackguard::net
