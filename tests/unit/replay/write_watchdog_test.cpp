// The write deadline under the replay's rabbitmq-c client: a write the peer never reads ends
// with an error once the deadline passes; a write that completes leaves the socket alone.
#include "proxy/replay/write_watchdog.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <vector>

namespace nackguard::replay {
namespace {

using namespace std::chrono_literals;

struct SocketPair {
  int fds[2] = {-1, -1};
  SocketPair() { EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0); }
  ~SocketPair() {
    ::close(fds[0]);
    ::close(fds[1]);
  }
};

TEST(WriteWatchdog, AWriteThePeerNeverReadsEndsAtTheDeadline) {
  SocketPair pair;
  WriteWatchdog watchdog(200ms);
  std::vector<char> chunk(1 << 20, 'x');
  ssize_t result = 0;
  {
    auto armed = watchdog.arm(pair.fds[0]);
    // Blocking: the peer reads nothing, so the socket's buffer fills and send() waits.
    for (int i = 0; i < 1000 && result >= 0; ++i) {
      result = ::send(pair.fds[0], chunk.data(), chunk.size(), MSG_NOSIGNAL);
    }
  }
  EXPECT_LT(result, 0) << "a megabyte was written a thousand times to a peer that never reads";
  EXPECT_EQ(errno, EPIPE);
  EXPECT_TRUE(watchdog.fired());
}

TEST(WriteWatchdog, AWriteThatCompletesLeavesTheSocketOpen) {
  SocketPair pair;
  WriteWatchdog watchdog(50ms);
  {
    auto armed = watchdog.arm(pair.fds[0]);
    ASSERT_EQ(::send(pair.fds[0], "ping", 4, MSG_NOSIGNAL), 4);
  }
  std::this_thread::sleep_for(200ms);  // four deadlines, none armed
  EXPECT_FALSE(watchdog.fired());
  EXPECT_EQ(::send(pair.fds[0], "pong", 4, MSG_NOSIGNAL), 4);
  char got[8] = {};
  EXPECT_EQ(::recv(pair.fds[1], got, sizeof got, 0), 8);
}

}  // namespace
}  // namespace nackguard::replay
