// Compatibility client: the RabbitMQ Java client (Debian librabbitmq-client-java, amqp-client
// 5.0.0), with automatic recovery and topology recovery on, as a Java service runs it.
// tests/compat/compat_languages.py compiles it into the build tree and runs it as
//
//   java -cp BUILD/compat-clients/java:amqp-client.jar:slf4j-*.jar JavaConsumer MODE
//
// with COMPAT_URL, COMPAT_QUEUE, COMPAT_POISON, COMPAT_EVENTS, COMPAT_PREFETCH and
// COMPAT_QUEUE_TYPE set. MODE is one of (every mode acks the good messages):
//   nack       consume; the poison gets basic.nack(requeue=true)
//   reject     consume; the poison gets basic.reject(requeue=true)
//   crash      consume; the process halts (code 17) as soon as it gets the poison
//   get        poll with basic.get; the poison gets basic.reject(requeue=true)
//   reconnect  consume as nack does; the client's own automatic recovery reconnects it
//   traffic    declare, publish with confirms, basic.get, qos, consume and ack, cancel: a
//              transcript ("t ..." events) to compare directly and through nackguard
// Events are the lines of tests/compat/clients/events.py, plus "crash LABEL", "get N",
// "empty N", "lost CODE TEXT" and "t ...". Runs until SIGTERM (traffic: until done), then
// closes and exits 0; exits 1 on any error, after an "error" event.

import com.rabbitmq.client.AMQP;
import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Connection;
import com.rabbitmq.client.ConnectionFactory;
import com.rabbitmq.client.DefaultConsumer;
import com.rabbitmq.client.Envelope;
import com.rabbitmq.client.GetResponse;
import com.rabbitmq.client.Recoverable;
import com.rabbitmq.client.RecoveryListener;
import com.rabbitmq.client.ShutdownSignalException;
import java.io.FileOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Date;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

public final class JavaConsumer {
    private static final int CRASH_EXIT_CODE = 17;
    private static final String QUEUE = env("COMPAT_QUEUE");
    private static final String POISON = env("COMPAT_POISON");
    private static final CountDownLatch STOP = new CountDownLatch(1);  // SIGTERM
    private static volatile String failure;  // set by the client's threads
    private static FileOutputStream events;

    private static String env(String name) {
        String value = System.getenv(name);
        if (value == null || value.isEmpty()) {
            throw new IllegalStateException(name + " is not set");
        }
        return value;
    }

    /** One line per event, one write(2) each on an O_APPEND file: lines never interleave. */
    static synchronized void event(Object... words) {
        StringBuilder line = new StringBuilder();
        for (Object word : words) {
            line.append(line.length() == 0 ? "" : " ").append(word);
        }
        try {
            events.write((line.toString().replace('\n', ' ') + "\n")
                    .getBytes(StandardCharsets.UTF_8));
        } catch (IOException e) {
            System.err.println("java client: events: " + e);
        }
    }

    static void fail(String what) {
        if (failure == null) {
            failure = what;
        }
    }

    static Map<String, Object> queueArguments() {
        Map<String, Object> args = new HashMap<>();
        if ("quorum".equals(System.getenv("COMPAT_QUEUE_TYPE"))) {
            args.put("x-queue-type", "quorum");
        }
        return args;
    }

    static Connection connect(boolean reconnecting) throws Exception {
        ConnectionFactory factory = new ConnectionFactory();
        factory.setUri(env("COMPAT_URL"));
        factory.setAutomaticRecoveryEnabled(true);
        factory.setTopologyRecoveryEnabled(true);
        factory.setNetworkRecoveryInterval(500);
        factory.setRequestedHeartbeat(10);
        Connection conn = factory.newConnection("compat " + QUEUE);
        conn.addShutdownListener(cause -> {
            if (cause.isInitiatedByApplication()) {
                return;
            }
            String why = describe(cause);
            if (reconnecting) {
                event("lost", why);
            } else {
                fail("connection lost: " + why);
            }
        });
        ((Recoverable) conn).addRecoveryListener(new RecoveryListener() {
            @Override public void handleRecovery(Recoverable recoverable) {
                event("start");  // reconnected, its consumer recovered with the topology
            }
            @Override public void handleRecoveryStarted(Recoverable recoverable) {
                if (!reconnecting) {
                    fail("automatic recovery started");
                }
            }
        });
        return conn;
    }

    static String describe(ShutdownSignalException cause) {
        Object reason = cause.getReason();
        if (reason instanceof AMQP.Connection.Close) {
            AMQP.Connection.Close close = (AMQP.Connection.Close) reason;
            return close.getReplyCode() + " " + close.getReplyText();
        }
        return "? " + cause.getMessage();
    }

    /** Acks a good message; gives the poison back as `mode` says. */
    static void handle(Channel ch, Envelope envelope, byte[] body, String mode) throws IOException {
        String label = new String(body, StandardCharsets.UTF_8);
        long tag = envelope.getDeliveryTag();
        event("deliver", label, envelope.isRedeliver() ? 1 : 0);
        if (!label.equals(POISON)) {
            ch.basicAck(tag, false);
            event("ack", label);
            return;
        }
        switch (mode) {
            case "crash":
                event("crash", label);
                Runtime.getRuntime().halt(CRASH_EXIT_CODE);  // no close, no nack: a crash
                break;
            case "reject":
            case "get":
                ch.basicReject(tag, true);
                break;
            default:
                ch.basicNack(tag, false, true);
        }
        event("return", label);
    }

    static void waitForStop() throws Exception {
        while (!STOP.await(100, TimeUnit.MILLISECONDS)) {
            if (failure != null) {
                throw new IllegalStateException(failure);
            }
        }
    }

    static void consume(String mode) throws Exception {
        boolean reconnecting = mode.equals("reconnect");
        String handling = reconnecting ? "nack" : mode;
        Connection conn = connect(reconnecting);
        Channel ch = conn.createChannel();
        ch.basicQos(Integer.parseInt(env("COMPAT_PREFETCH")));
        ch.queueDeclare(QUEUE, true, false, false, queueArguments());  // recovered with it
        String tag = ch.basicConsume(QUEUE, false, new DefaultConsumer(ch) {
            @Override
            public void handleDelivery(String consumerTag, Envelope envelope,
                                       AMQP.BasicProperties properties, byte[] body) {
                try {
                    handle(getChannel(), envelope, body, handling);
                } catch (IOException | RuntimeException e) {
                    fail("handling a delivery: " + e);
                }
            }

            @Override
            public void handleCancel(String consumerTag) {
                fail("consumer cancelled by the broker");
            }
        });
        event("start");
        waitForStop();
        ch.basicCancel(tag);
        conn.close();
        event("stop");
    }

    static void poll() throws Exception {
        Connection conn = connect(false);
        Channel ch = conn.createChannel();
        ch.basicQos(Integer.parseInt(env("COMPAT_PREFETCH")));
        event("start");
        for (int n = 1; STOP.getCount() > 0; n++) {
            if (failure != null) {
                throw new IllegalStateException(failure);
            }
            event("get", n);
            GetResponse got = ch.basicGet(QUEUE, false);
            if (got == null) {
                event("empty", n);
                Thread.sleep(20);  // the poller's interval on an empty queue
                continue;
            }
            event("got", n);
            handle(ch, got.getEnvelope(), got.getBody(), "get");
        }
        conn.close();
        event("stop");
    }

    static String describe(Envelope e, AMQP.BasicProperties p, byte[] body) {
        StringBuilder headers = new StringBuilder();
        if (p.getHeaders() != null) {
            for (Map.Entry<String, Object> h : new TreeMap<>(p.getHeaders()).entrySet()) {
                headers.append(headers.length() == 0 ? "" : ",").append(h.getKey()).append('=')
                        .append(h.getValue().getClass().getSimpleName()).append(':')
                        .append(h.getValue());
            }
        }
        return String.format("tag=%d redelivered=%b exchange='%s' key-is-queue=%b body=%s "
                + "content-type=%s encoding=%s mode=%s priority=%s correlation=%s reply-to=%s "
                + "expiration=%s message-id=%s timestamp=%s type=%s user=%s app=%s headers={%s}",
                e.getDeliveryTag(), e.isRedeliver(), e.getExchange(),
                QUEUE.equals(e.getRoutingKey()), new String(body, StandardCharsets.UTF_8),
                p.getContentType(), p.getContentEncoding(), p.getDeliveryMode(), p.getPriority(),
                p.getCorrelationId(), p.getReplyTo(), p.getExpiration(), p.getMessageId(),
                p.getTimestamp() == null ? null : p.getTimestamp().getTime() / 1000, p.getType(),
                p.getUserId(), p.getAppId(), headers);
    }

    /** The client's common API once, written as "t ..." events. */
    static void traffic() throws Exception {
        Connection conn = connect(false);
        Channel ch = conn.createChannel();
        AMQP.Queue.DeclareOk declared = ch.queueDeclare(QUEUE, true, false, false,
                                                        queueArguments());
        event("t", "declare-ok", declared.getQueue().equals(QUEUE), declared.getMessageCount(),
              declared.getConsumerCount());
        ch.confirmSelect();
        final int count = 10;
        for (int i = 1; i <= count; i++) {
            Map<String, Object> headers = new HashMap<>();
            headers.put("n", i);
            headers.put("s", "text");
            headers.put("b", true);
            headers.put("f", 1.5);
            AMQP.BasicProperties props = new AMQP.BasicProperties.Builder()
                    .contentType("text/plain").contentEncoding("utf-8").headers(headers)
                    .deliveryMode(2).priority(1).correlationId("c-" + i).replyTo("replies")
                    .messageId("m-" + i).timestamp(new Date((1700000000L + i) * 1000))
                    .type("compat").appId("JavaConsumer").build();
            ch.basicPublish("", QUEUE, true, props,
                            String.format("traffic-%02d", i).getBytes(StandardCharsets.UTF_8));
        }
        ch.waitForConfirmsOrDie(10000);  // throws if any was nacked
        event("t", "confirms", count, "nacked", 0);
        GetResponse got = ch.basicGet(QUEUE, false);
        if (got == null) {
            throw new IllegalStateException("basic.get: empty after publishing " + count);
        }
        event("t", "get-ok", got.getMessageCount(),
              describe(got.getEnvelope(), got.getProps(), got.getBody()));
        ch.basicAck(got.getEnvelope().getDeliveryTag(), false);
        ch.basicQos(5);
        event("t", "qos-ok");
        BlockingQueue<Object[]> deliveries = new LinkedBlockingQueue<>();
        ch.basicConsume(QUEUE, false, "compat-traffic", new DefaultConsumer(ch) {
            @Override
            public void handleDelivery(String consumerTag, Envelope envelope,
                                       AMQP.BasicProperties properties, byte[] body) {
                deliveries.add(new Object[] {envelope, properties, body});
            }
        });
        for (int i = 2; i <= count; i++) {
            Object[] d = deliveries.poll(10, TimeUnit.SECONDS);
            if (d == null) {
                throw new IllegalStateException("delivery " + i + " did not come in 10 s");
            }
            Envelope envelope = (Envelope) d[0];
            event("t", "deliver", describe(envelope, (AMQP.BasicProperties) d[1], (byte[]) d[2]));
            if (i % 3 == 1 || i == count) {  // every third one acks the ones before it too
                ch.basicAck(envelope.getDeliveryTag(), true);
            }
        }
        ch.basicCancel("compat-traffic");
        event("t", "cancel-ok");
        if (ch.basicGet(QUEUE, false) != null) {
            throw new IllegalStateException("basic.get on the emptied queue got a message");
        }
        event("t", "get-empty");
        AMQP.Queue.DeclareOk left = ch.queueDeclarePassive(QUEUE);
        event("t", "left", left.getMessageCount(), left.getConsumerCount());
        ch.close();
        conn.close();
        event("stop");
    }

    public static void main(String[] args) throws Exception {
        List<String> modes = new ArrayList<>(List.of("nack", "reject", "crash", "get",
                                                     "reconnect", "traffic"));
        if (args.length != 1 || !modes.contains(args[0])) {
            System.err.println("usage: JavaConsumer " + String.join("|", modes));
            System.exit(2);
        }
        events = new FileOutputStream(env("COMPAT_EVENTS"), true);
        sun.misc.Signal.handle(new sun.misc.Signal("TERM"), signal -> STOP.countDown());
        try {
            switch (args[0]) {
                case "get": poll(); break;
                case "traffic": traffic(); break;
                default: consume(args[0]);
            }
        } catch (Exception e) {
            event("error", e.getClass().getSimpleName() + ": " + e.getMessage());
            System.err.println("java client: " + e);
            e.printStackTrace();
            System.exit(1);
        }
        System.exit(0);
    }
}
