#pragma once
// The bytes queued for one side: frames forwarded as they were read, which stay where they
// were read (in the other side's InputBuffer) as one run of consecutive bytes while nothing
// else is queued, then everything copied or built after them. Sans-io: the session and the
// delivery router emit into it, the relay writes it out.

#include <algorithm>
#include <cstddef>

#include "proxy/amqp/bytes.hpp"
#include "proxy/session/input_buffer.hpp"

namespace nackguard::session {

class Outbox {
 public:
  Outbox() = default;
  Outbox(const Outbox&) = delete;
  Outbox& operator=(const Outbox&) = delete;
  // The other side's input, whose frames may be forwarded without a copy: set before emit().
  void set_source(const InputBuffer& source) { source_ = &source; }

  // Queues `bytes`: kept where they are if they extend the forwarded run, or start it while
  // nothing is queued and they lie in the source; copied otherwise. Nothing once closed.
  void emit(amqp::ByteView bytes) {
    if (closed_) return;
    if (!ahead_.empty() && !claim_ahead(bytes)) return;
    if (!forwarded_.empty() && bytes.data() == forwarded_.data() + forwarded_.size()) {
      forwarded_ = amqp::ByteView(forwarded_.data(), forwarded_.size() + bytes.size());
      return;
    }
    if (forwarded_.empty() && out_.empty() && source_->holds(bytes)) {
      forwarded_ = bytes;
      return;
    }
    copy_forwarded();
    out_.insert(out_.end(), bytes.begin(), bytes.end());
  }
  // The forwarded run: ahead of bytes(), which is empty while this is not. Valid until the
  // source reads again, or bytes() is called.
  amqp::ByteView forwarded() const { return forwarded_; }
  // The first `n` bytes of forwarded() were written; the rest moves to bytes().
  void forwarded_written(std::size_t n) {
    forwarded_ = forwarded_.subspan(std::min(n, forwarded_.size()));
    copy_forwarded();
  }
  // Everything queued, copied: the caller moves the bytes out and writes them.
  amqp::Bytes& bytes() {
    copy_forwarded();
    return out_;
  }
  // The relay wrote `bytes`, frames of the source that the session will emit next, before the
  // session handled them (Session::receive_input): their emit() then queues nothing.
  void written_ahead(amqp::ByteView bytes) { ahead_ = bytes; }
  // Whether bytes written ahead were not emitted as they were (a session that handled them
  // otherwise than receive_input foresaw), or are still unclaimed.
  bool ahead_missed() const { return ahead_missed_ || !ahead_.empty(); }
  bool empty() const { return forwarded_.empty() && out_.empty(); }
  // Nothing more is queued: once what is queued is written, the side's socket is closed.
  void close() { closed_ = true; }
  bool closed() const { return closed_; }
  // The forwarded run is about to be overwritten (the source reads again): copied.
  void copy_forwarded() {
    if (forwarded_.empty()) return;
    out_.insert(out_.end(), forwarded_.begin(), forwarded_.end());
    forwarded_ = {};
  }

 private:
  // Claims the front of `bytes` that was written ahead; false if nothing of it is left to queue.
  bool claim_ahead(amqp::ByteView& bytes) {
    if (bytes.data() != ahead_.data()) {
      ahead_missed_ = true;
      ahead_ = {};
      return true;
    }
    std::size_t n = std::min(bytes.size(), ahead_.size());
    ahead_ = ahead_.subspan(n);
    bytes = bytes.subspan(n);
    return !bytes.empty();
  }

  const InputBuffer* source_ = nullptr;
  amqp::ByteView ahead_;  // written by the relay, not emitted yet
  bool ahead_missed_ = false;
  amqp::ByteView forwarded_;
  amqp::Bytes out_;
  bool closed_ = false;
};

}  // namespace nackguard::session
