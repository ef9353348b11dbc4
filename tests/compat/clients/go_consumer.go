// Compatibility client: amqp091-go (Debian golang-github-rabbitmq-amqp091-go-dev), the Go
// client of RabbitMQ, written the way a Go service uses it. tests/compat/compat_languages.py
// compiles it into the build tree and runs it as
//
//	go_consumer MODE
//
// with COMPAT_URL, COMPAT_QUEUE, COMPAT_POISON, COMPAT_EVENTS, COMPAT_PREFETCH and
// COMPAT_QUEUE_TYPE set. MODE is one of (every mode acks the good messages):
//
//	nack       consume; the poison gets basic.nack(requeue=true)
//	reject     consume; the poison gets basic.reject(requeue=true)
//	crash      consume; the process exits (code 17) as soon as it gets the poison
//	get        poll with basic.get; the poison gets basic.reject(requeue=true)
//	reconnect  consume as nack does, and dial again whenever the connection is lost
//	traffic    declare, publish with confirms, basic.get, qos, consume and ack, cancel:
//	           a transcript ("t ..." events) to compare directly and through nackguard
//
// Events are the lines of tests/compat/clients/events.py, plus "crash LABEL", "get N",
// "empty N", "lost CODE TEXT" and "t ...". Runs until SIGTERM (traffic: until done), then
// closes and exits 0; exits 1 on any error, after an "error" event.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

const crashExitCode = 17

var (
	queue  = mustEnv("COMPAT_QUEUE")
	poison = mustEnv("COMPAT_POISON")
	events *os.File
	stop   = make(chan struct{}) // closed at SIGTERM
)

func mustEnv(name string) string {
	value := os.Getenv(name)
	if value == "" {
		fmt.Fprintf(os.Stderr, "go client: %s is not set\n", name)
		os.Exit(2)
	}
	return value
}

// event appends one line with a single write (O_APPEND), so that lines never interleave.
func event(words ...interface{}) {
	text := strings.ReplaceAll(strings.TrimSpace(fmt.Sprintln(words...)), "\n", " ")
	if _, err := events.WriteString(text + "\n"); err != nil {
		fmt.Fprintf(os.Stderr, "go client: events: %v\n", err)
	}
}

func bit(b bool) int {
	if b {
		return 1
	}
	return 0
}

func stopping() bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

func dial() (*amqp.Connection, error) {
	return amqp.DialConfig(mustEnv("COMPAT_URL"), amqp.Config{
		Heartbeat:  10 * time.Second,
		Locale:     "en_US",
		Properties: amqp.Table{"connection_name": "compat " + queue},
	})
}

func openChannel(conn *amqp.Connection) (*amqp.Channel, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	prefetch, err := strconv.Atoi(mustEnv("COMPAT_PREFETCH"))
	if err != nil {
		return nil, err
	}
	return ch, ch.Qos(prefetch, 0, false)
}

// handle processes one delivery: acks a good message, gives the poison back as `mode` says.
func handle(d amqp.Delivery, mode string) error {
	label := string(d.Body)
	event("deliver", label, bit(d.Redelivered))
	if label != poison {
		if err := d.Ack(false); err != nil {
			return err
		}
		event("ack", label)
		return nil
	}
	switch mode {
	case "crash":
		event("crash", label)
		os.Exit(crashExitCode) // no close, no nack: what the poison does to this process
	case "reject", "get":
		if err := d.Reject(true); err != nil {
			return err
		}
	default:
		if err := d.Nack(false, true); err != nil {
			return err
		}
	}
	event("return", label)
	return nil
}

// consume consumes on one connection until SIGTERM (nil) or until the connection is lost
// (the *amqp.Error the library reports).
func consume(conn *amqp.Connection, mode string) error {
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	ch, err := openChannel(conn)
	if err != nil {
		return err
	}
	deliveries, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		return err
	}
	event("start")
	for {
		select {
		case <-stop:
			return shutdown(conn, ch)
		case lost := <-closed:
			if lost == nil {
				return fmt.Errorf("connection closed")
			}
			return lost
		case d, ok := <-deliveries:
			if !ok {
				deliveries = nil // the library closes it when the channel ends: wait for why
				continue
			}
			if err := handle(d, mode); err != nil {
				return err
			}
		}
	}
}

func shutdown(conn *amqp.Connection, ch *amqp.Channel) error {
	if err := ch.Close(); err != nil {
		return err
	}
	if err := conn.Close(); err != nil {
		return err
	}
	event("stop")
	return nil
}

// reconnecting consumes as `nack` does, and dials again (the usual NotifyClose loop of a Go
// service) whenever the connection is lost, until SIGTERM.
func reconnecting() error {
	for attempt := 0; !stopping(); attempt++ {
		conn, err := dial()
		if err != nil {
			if attempt > 50 {
				return err
			}
			event("dial-failed", err)
			time.Sleep(200 * time.Millisecond) // the service's back-off between dials
			continue
		}
		attempt = 0
		err = consume(conn, "nack")
		if err == nil {
			return nil
		}
		lost, ok := err.(*amqp.Error)
		if !ok {
			return err
		}
		event("lost", lost.Code, lost.Reason)
		conn.Close()
	}
	return nil
}

// poll takes messages with basic.get until SIGTERM; "get N" before each call and "empty N"
// or a delivery after it show the suite that every basic.get was answered.
func poll(conn *amqp.Connection) error {
	ch, err := openChannel(conn)
	if err != nil {
		return err
	}
	event("start")
	for n := 1; !stopping(); n++ {
		event("get", n)
		d, ok, err := ch.Get(queue, false)
		if err != nil {
			return err
		}
		if !ok {
			event("empty", n)
			time.Sleep(20 * time.Millisecond) // the poller's interval on an empty queue
			continue
		}
		event("got", n)
		if err := handle(d, "get"); err != nil {
			return err
		}
	}
	return shutdown(conn, ch)
}

func describe(d amqp.Delivery) string {
	keys := make([]string, 0, len(d.Headers))
	for k := range d.Headers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	headers := make([]string, 0, len(keys))
	for _, k := range keys {
		headers = append(headers, fmt.Sprintf("%s=%T:%v", k, d.Headers[k], d.Headers[k]))
	}
	return fmt.Sprintf("tag=%d redelivered=%v exchange=%q key-is-queue=%v body=%s "+
		"content-type=%s encoding=%s mode=%d priority=%d correlation=%s reply-to=%s "+
		"expiration=%q message-id=%s timestamp=%d type=%s user=%q app=%s headers={%s}",
		d.DeliveryTag, d.Redelivered, d.Exchange, d.RoutingKey == queue, d.Body,
		d.ContentType, d.ContentEncoding, d.DeliveryMode, d.Priority, d.CorrelationId,
		d.ReplyTo, d.Expiration, d.MessageId, d.Timestamp.Unix(), d.Type, d.UserId, d.AppId,
		strings.Join(headers, ","))
}

// traffic runs the client's common API once and writes what it saw as "t ..." events.
func traffic(conn *amqp.Connection) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	var args amqp.Table
	if os.Getenv("COMPAT_QUEUE_TYPE") == "quorum" {
		args = amqp.Table{"x-queue-type": "quorum"}
	}
	q, err := ch.QueueDeclare(queue, true, false, false, false, args)
	if err != nil {
		return err
	}
	event("t", "declare-ok", q.Name == queue, q.Messages, q.Consumers)
	if err := ch.Confirm(false); err != nil {
		return err
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 16))
	const count = 10
	for i := 1; i <= count; i++ {
		err := ch.Publish("", queue, true, false, amqp.Publishing{
			Headers:     amqp.Table{"n": int32(i), "s": "text", "b": true, "f": 1.5},
			ContentType: "text/plain", ContentEncoding: "utf-8", DeliveryMode: amqp.Persistent,
			Priority: 1, CorrelationId: fmt.Sprintf("c-%d", i), ReplyTo: "replies",
			MessageId: fmt.Sprintf("m-%d", i), Timestamp: time.Unix(1700000000+int64(i), 0),
			Type: "compat", AppId: "go_consumer", Body: []byte(fmt.Sprintf("traffic-%02d", i)),
		})
		if err != nil {
			return err
		}
	}
	acked, nacked := []string{}, 0
	for len(acked)+nacked < count {
		c := <-confirms
		if c.Ack {
			acked = append(acked, strconv.FormatUint(c.DeliveryTag, 10))
		} else {
			nacked++
		}
	}
	event("t", "confirms", strings.Join(acked, ","), "nacked", nacked)
	d, ok, err := ch.Get(queue, false)
	if err != nil || !ok {
		return fmt.Errorf("basic.get: ok=%v err=%v", ok, err)
	}
	event("t", "get-ok", d.MessageCount, describe(d))
	if err := d.Ack(false); err != nil {
		return err
	}
	if err := ch.Qos(5, 0, false); err != nil {
		return err
	}
	event("t", "qos-ok")
	deliveries, err := ch.Consume(queue, "compat-traffic", false, false, false, false, nil)
	if err != nil {
		return err
	}
	for i := 2; i <= count; i++ {
		d := <-deliveries
		event("t", "deliver", describe(d))
		if i%3 == 1 || i == count { // every third one acks the ones before it too
			if err := d.Ack(true); err != nil {
				return err
			}
		}
	}
	if err := ch.Cancel("compat-traffic", false); err != nil {
		return err
	}
	event("t", "cancel-ok")
	if _, ok, err := ch.Get(queue, false); err != nil || ok {
		return fmt.Errorf("basic.get on the emptied queue: ok=%v err=%v", ok, err)
	}
	event("t", "get-empty")
	q, err = ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		return err
	}
	event("t", "left", q.Messages, q.Consumers)
	return shutdown(conn, ch)
}

func run(mode string) error {
	if mode == "reconnect" {
		return reconnecting()
	}
	conn, err := dial()
	if err != nil {
		return err
	}
	switch mode {
	case "nack", "reject", "crash":
		return consume(conn, mode)
	case "get":
		return poll(conn)
	case "traffic":
		return traffic(conn)
	}
	return fmt.Errorf("unknown mode %q", mode)
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: go_consumer nack|reject|crash|get|reconnect|traffic")
		os.Exit(2)
	}
	var err error
	events, err = os.OpenFile(mustEnv("COMPAT_EVENTS"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "go client: %v\n", err)
		os.Exit(1)
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	go func() { <-term; close(stop) }()
	if err := run(os.Args[1]); err != nil {
		event("error", fmt.Sprintf("%T: %v", err, err))
		fmt.Fprintf(os.Stderr, "go client: %T: %v\n", err, err)
		os.Exit(1)
	}
}
