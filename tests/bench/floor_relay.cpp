// nackguard-floor-relay: the least a user-space TCP relay can do per message on this kernel, as
// a yardstick for tests/bench/compare.sh --floor. One thread, one epoll set (edge-triggered),
// one upstream connection per client connection, a 256 KiB buffer per direction, TCP_NODELAY,
// and per readiness event one recv() into the buffer and one send() of what it holds. It parses
// nothing and allocates nothing per message: what it costs is the kernel's part of relaying,
// which nackguard, reading every byte to parse it, cannot go below.
//
//   nackguard-floor-relay LISTEN_PORT UPSTREAM_PORT [BATCH_US]
//
// With BATCH_US above zero it batches as `run_reporting_errors` can (proxy/net/io_threads.hpp):
// after an event that came within BATCH_US, it sleeps BATCH_US, then takes every ready event.
// Both on 127.0.0.1. Runs until killed. Not a product: no timeouts, no limits on connections.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

namespace {

constexpr std::size_t kBuffer = 256 * 1024;

struct Side {
  int fd = -1;
  Side* peer = nullptr;
  std::unique_ptr<char[]> out{new char[kBuffer]};  // bytes read from the peer, for this side
  std::size_t begin = 0, end = 0;
  bool peer_blocked = false;  // the peer stopped reading: this side's buffer was full
};

int epoll_fd = -1;

void close_pair(Side* s) {
  if (s->fd < 0) return;
  close(s->fd);
  close(s->peer->fd);
  s->fd = s->peer->fd = -1;  // the Sides leak: a yardstick, not a product
}

void flush(Side* s) {
  while (s->begin < s->end) {
    ssize_t n = send(s->fd, s->out.get() + s->begin, s->end - s->begin, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno != EAGAIN) close_pair(s);
      return;  // EPOLLOUT (edge-triggered) comes back when the socket takes more
    }
    s->begin += static_cast<std::size_t>(n);
  }
  s->begin = s->end = 0;
}

void pump(Side* from);

void on_writable(Side* s) {
  flush(s);
  if (s->fd >= 0 && s->end == 0 && s->peer_blocked) {
    s->peer_blocked = false;
    pump(s->peer);
  }
}

// One recv() of what `from` holds into its peer's buffer, then one send() of it.
void pump(Side* from) {
  Side* to = from->peer;
  for (;;) {
    std::size_t room = kBuffer - to->end;
    if (room == 0) {
      to->peer_blocked = true;
      return;
    }
    ssize_t n = recv(from->fd, to->out.get() + to->end, room, 0);
    if (n == 0 || (n < 0 && errno != EAGAIN)) return close_pair(from);
    if (n < 0) return;
    to->end += static_cast<std::size_t>(n);
    flush(to);
    if (to->fd < 0) return;
    // A short read drained the socket: the next byte brings a new edge.
    if (static_cast<std::size_t>(n) < room) return;
  }
}

int tcp_socket() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

sockaddr_in loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

void watch(Side* s) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
  ev.data.ptr = s;
  epoll_ctl(epoll_fd, EPOLL_CTL_ADD, s->fd, &ev);
}

void accept_all(int listener, int upstream_port) {
  for (;;) {
    int client = accept4(listener, nullptr, nullptr, SOCK_NONBLOCK);
    if (client < 0) return;
    int one = 1;
    setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int broker = tcp_socket();
    sockaddr_in to = loopback(upstream_port);
    if (connect(broker, reinterpret_cast<sockaddr*>(&to), sizeof to) < 0 && errno != EINPROGRESS) {
      close(client);
      close(broker);
      continue;
    }
    auto* a = new Side;
    auto* b = new Side;
    a->fd = client, b->fd = broker, a->peer = b, b->peer = a;
    watch(a);
    watch(b);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s LISTEN_PORT UPSTREAM_PORT [BATCH_US]\n", argv[0]);
    return 2;
  }
  int listen_port = std::atoi(argv[1]);
  int upstream_port = std::atoi(argv[2]);
  auto batch = std::chrono::microseconds(argc > 3 ? std::atoi(argv[3]) : 0);
  if (batch.count() > 0) prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
  int listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  int one = 1;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in at = loopback(listen_port);
  if (bind(listener, reinterpret_cast<sockaddr*>(&at), sizeof at) < 0 || listen(listener, 4096)) {
    std::perror("nackguard-floor-relay: bind/listen");
    return 1;
  }
  epoll_fd = epoll_create1(0);
  epoll_event lev{};
  lev.events = EPOLLIN;
  lev.data.ptr = nullptr;
  epoll_ctl(epoll_fd, EPOLL_CTL_ADD, listener, &lev);
  std::vector<epoll_event> events(256);
  bool batching = false;
  for (;;) {
    if (batching) std::this_thread::sleep_for(batch);
    auto before = std::chrono::steady_clock::now();
    int n = epoll_wait(epoll_fd, events.data(), static_cast<int>(events.size()), batching ? 0 : -1);
    if (n < 0 && errno != EINTR) return 1;
    if (batch.count() > 0) batching = n > 0 && std::chrono::steady_clock::now() - before < batch;
    for (int i = 0; i < n; ++i) {
      auto* s = static_cast<Side*>(events[i].data.ptr);
      if (s == nullptr) {
        accept_all(listener, upstream_port);
        continue;
      }
      if (s->fd < 0) continue;
      if (events[i].events & EPOLLOUT) on_writable(s);
      if (s->fd >= 0 && (events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))) pump(s);
    }
  }
}
