# Compatibility client: Bunny (Debian ruby-bunny), the Ruby client of RabbitMQ, with its
# automatic connection recovery on (its default), as a Ruby service runs it.
# tests/compat/compat_languages.py runs it as
#
#   ruby bunny_consumer.rb MODE
#
# with COMPAT_URL, COMPAT_QUEUE, COMPAT_POISON, COMPAT_EVENTS, COMPAT_PREFETCH and
# COMPAT_QUEUE_TYPE set. MODE is one of (every mode acks the good messages):
#   nack       consume; the poison gets basic.nack(requeue=true)
#   reject     consume; the poison gets basic.reject(requeue=true)
#   crash      consume; the process exits (exit!, code 17) as soon as it gets the poison
#   get        poll with basic.get (Queue#pop); the poison gets basic.reject(requeue=true)
#   reconnect  consume as nack does; Bunny's own automatic recovery reconnects it
#   traffic    declare, publish with confirms, basic.get, qos, consume and ack, cancel: a
#              transcript ("t ..." events) to compare directly and through nackguard
# Events are the lines of tests/compat/clients/events.py, plus "crash LABEL", "get N",
# "empty N", "lost" (before each recovery attempt) and "t ...". In reconnect mode Bunny's own
# log lines (its recovery says "Recovering from connection.close (REASON)") go to the events
# file as "library ..." lines; otherwise to stderr. Runs until SIGTERM (traffic: until done),
# then closes and exits 0; exits 1 on any error, after an "error" event.

require "bunny"
require "logger"
require "timeout"

CRASH_EXIT_CODE = 17
MODES = %w[nack reject crash get reconnect traffic].freeze

def env(name)
  value = ENV[name]
  abort("bunny client: #{name} is not set") if value.nil? || value.empty?
  value
end

QUEUE = env("COMPAT_QUEUE")
POISON = env("COMPAT_POISON")
EVENTS = File.open(env("COMPAT_EVENTS"), File::WRONLY | File::APPEND | File::CREAT)
EVENTS.sync = true
EVENTS_LOCK = Mutex.new

# One line per event, one write(2) each on an O_APPEND file: lines never interleave.
def event(*words)
  line = words.join(" ").tr("\n", " ") + "\n"
  EVENTS_LOCK.synchronize { EVENTS.syswrite(line) }
end

def library_logger(mode)
  return Logger.new($stderr, level: Logger::WARN) unless mode == "reconnect"
  Logger.new(EVENTS, level: Logger::WARN,
                     formatter: ->(severity, _time, _name, msg) { "library #{severity} #{msg}\n" })
end

def connect(mode, failures)
  conn = Bunny.new(env("COMPAT_URL"), connection_name: "compat #{QUEUE}", heartbeat: 10,
                                      network_recovery_interval: 0.5,
                                      logger: library_logger(mode))
  conn.start
  conn.before_recovery_attempt_starts do
    mode == "reconnect" ? event("lost") : failures << "automatic recovery started"
  end
  conn.after_recovery_completed { event("start") } # its channel and consumer recovered
  conn
end

def queue_arguments
  ENV["COMPAT_QUEUE_TYPE"] == "quorum" ? { "x-queue-type" => "quorum" } : {}
end

# Acks a good message; gives the poison back as `mode` says.
def handle(channel, delivery_info, body, mode)
  event("deliver", body, delivery_info.redelivered? ? 1 : 0)
  if body != POISON
    channel.ack(delivery_info.delivery_tag)
    event("ack", body)
    return
  end
  case mode
  when "crash"
    event("crash", body)
    exit!(CRASH_EXIT_CODE) # no close, no nack: a crash (exit! skips at_exit and ensure)
  when "reject", "get"
    channel.reject(delivery_info.delivery_tag, true)
  else
    channel.nack(delivery_info.delivery_tag, false, true)
  end
  event("return", body)
end

$stopping = false # set at SIGTERM

def wait_for_stop(failures)
  until $stopping
    raise failures.pop unless failures.empty?
    sleep 0.1
  end
end

def consume(mode, failures)
  conn = connect(mode, failures)
  channel = conn.create_channel
  channel.prefetch(Integer(env("COMPAT_PREFETCH")))
  queue = channel.queue(QUEUE, durable: true, arguments: queue_arguments)
  handling = mode == "reconnect" ? "nack" : mode
  cancelled = ->(*) { failures << "consumer cancelled" }
  consumer = queue.subscribe(manual_ack: true, on_cancellation: cancelled) do |info, _props, body|
    handle(channel, info, body, handling)
  rescue StandardError => e
    failures << "handling a delivery: #{e.class}: #{e.message}"
  end
  event("start")
  wait_for_stop(failures)
  consumer.cancel
  conn.close
  event("stop")
end

def poll(failures)
  conn = connect("get", failures)
  channel = conn.create_channel
  channel.prefetch(Integer(env("COMPAT_PREFETCH")))
  queue = channel.queue(QUEUE, durable: true, arguments: queue_arguments)
  event("start")
  n = 0
  until $stopping
    raise failures.pop unless failures.empty?
    n += 1
    event("get", n)
    info, _props, body = queue.pop(manual_ack: true)
    if info.nil?
      event("empty", n)
      sleep 0.02 # the poller's interval on an empty queue
      next
    end
    event("got", n)
    handle(channel, info, body, "get")
  end
  conn.close
  event("stop")
end

def describe(info, props, body)
  headers = (props.headers || {}).sort.map { |k, v| "#{k}=#{v.class}:#{v}" }.join(",")
  format("tag=%d redelivered=%s exchange='%s' key-is-queue=%s body=%s content-type=%s " \
         "encoding=%s mode=%s priority=%s correlation=%s reply-to=%s expiration=%s " \
         "message-id=%s timestamp=%s type=%s user=%s app=%s headers={%s}",
         info.delivery_tag.to_i, info.redelivered?, info.exchange, info.routing_key == QUEUE,
         body, props.content_type, props.content_encoding, props.delivery_mode, props.priority,
         props.correlation_id, props.reply_to, props.expiration, props.message_id,
         props.timestamp&.to_i, props.type, props.user_id, props.app_id, headers)
end

# The client's common API once, written as "t ..." events.
def traffic(failures)
  conn = connect("traffic", failures)
  channel = conn.create_channel
  declared = channel.queue_declare(QUEUE, durable: true, arguments: queue_arguments)
  event("t", "declare-ok", declared.queue == QUEUE, declared.message_count,
        declared.consumer_count)
  channel.confirm_select
  count = 10
  (1..count).each do |i|
    channel.default_exchange.publish(
      format("traffic-%02d", i), routing_key: QUEUE, mandatory: true, persistent: true,
      headers: { "n" => i, "s" => "text", "b" => true, "f" => 1.5 },
      content_type: "text/plain", content_encoding: "utf-8", priority: 1,
      correlation_id: "c-#{i}", reply_to: "replies", message_id: "m-#{i}",
      timestamp: 1_700_000_000 + i, type: "compat", app_id: "bunny_consumer")
  end
  raise "publisher confirms: nacked #{channel.nacked_set.to_a}" unless channel.wait_for_confirms
  event("t", "confirms", count, "nacked", channel.nacked_set.size)
  queue = channel.queue(QUEUE, durable: true, arguments: queue_arguments)
  info, props, body = queue.pop(manual_ack: true)
  raise "basic.get: empty after publishing #{count}" if info.nil?
  event("t", "get-ok", describe(info, props, body))
  channel.ack(info.delivery_tag)
  channel.prefetch(5)
  event("t", "qos-ok")
  deliveries = Queue.new
  consumer = queue.subscribe(manual_ack: true, consumer_tag: "compat-traffic") do |i, p, b|
    deliveries << [i, p, b]
  end
  (2..count).each do |i|
    d_info, d_props, d_body = Timeout.timeout(10, RuntimeError, "delivery #{i}: none in 10 s") do
      deliveries.pop
    end
    event("t", "deliver", describe(d_info, d_props, d_body))
    # every third one acks the ones before it too
    channel.ack(d_info.delivery_tag, true) if i % 3 == 1 || i == count
  end
  consumer.cancel
  event("t", "cancel-ok")
  raise "basic.get on the emptied queue got a message" unless queue.pop(manual_ack: true)[0].nil?
  event("t", "get-empty")
  left = channel.queue_declare(QUEUE, passive: true)
  event("t", "left", left.message_count, left.consumer_count)
  channel.close
  conn.close
  event("stop")
end

def main(mode)
  failures = Queue.new
  Signal.trap("TERM") { $stopping = true }
  case mode
  when "get" then poll(failures)
  when "traffic" then traffic(failures)
  else consume(mode, failures)
  end
  0
rescue StandardError => e
  event("error", "#{e.class}: #{e.message}")
  warn "bunny client: #{e.class}: #{e.message}\n#{e.backtrace.join("\n")}"
  1
end

unless ARGV.length == 1 && MODES.include?(ARGV[0])
  warn "usage: bunny_consumer.rb #{MODES.join('|')}"
  exit 2
end
exit main(ARGV[0])
