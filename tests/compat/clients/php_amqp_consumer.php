<?php
// Compatibility client: the php-amqp C extension (Debian php-amqp, on rabbitmq-c), as a PHP
// worker uses it. tests/compat/compat_languages.py runs it as
//
//   php php_amqp_consumer.php MODE
//
// with COMPAT_URL, COMPAT_QUEUE, COMPAT_POISON, COMPAT_EVENTS, COMPAT_PREFETCH and
// COMPAT_QUEUE_TYPE set. MODE is one of (every mode acks the good messages):
//   nack       consume; the poison gets basic.nack(requeue=true) (AMQPQueue::nack, AMQP_REQUEUE)
//   reject     consume; the poison gets basic.reject(requeue=true)
//   crash      consume; exit(17) as soon as it gets the poison (PHP runs its destructors on
//              the way out)
//   get        poll with basic.get (AMQPQueue::get); the poison gets basic.reject(requeue=true)
//   reconnect  consume as nack does; on a lost connection, connect again (the usual
//              catch-and-reconnect loop of a PHP worker, on AMQPException: the extension
//              has no recovery)
//   traffic    declare, publish with confirms, basic.get, qos, consume and ack, cancel: a
//              transcript ("t ..." events) to compare directly and through nackguard
// Events are the lines of tests/compat/clients/events.py, plus "crash LABEL", "get N",
// "empty N", "lost TEXT" and "t ...". Exits 1 on any error, after an "error" event.
//
// It installs no SIGTERM handler: while the extension waits in AMQPQueue::consume (or in
// rabbitmq-c's read of a reply) a pcntl handler never runs (measured here with php 8.2 and
// php-amqp 1.11, async signals or pcntl_signal_dispatch alike), so SIGTERM ends the worker
// by its default action, as supervisord's stop does to such a worker.

const CLIENT_NAME = 'php-amqp';
require_once __DIR__ . '/php_events.php';

function connect(): AMQPChannel
{
    $url = parse_url(env('COMPAT_URL'));
    $connection = new AMQPConnection([
        'host' => $url['host'], 'port' => $url['port'], 'login' => urldecode($url['user']),
        'password' => urldecode($url['pass']),
        'vhost' => urldecode(substr($url['path'] ?? '/', 1)) ?: '/',
    ]);
    $connection->setConnectionName('compat ' . env('COMPAT_QUEUE'));
    $connection->connect();
    return new AMQPChannel($connection);
}

function open_queue(AMQPChannel $channel, int $flags = AMQP_DURABLE): AMQPQueue
{
    $queue = new AMQPQueue($channel);
    $queue->setName(env('COMPAT_QUEUE'));
    $queue->setFlags($flags);
    if (getenv('COMPAT_QUEUE_TYPE') === 'quorum' && !($flags & AMQP_PASSIVE)) {
        $queue->setArgument('x-queue-type', 'quorum');
    }
    return $queue;
}

// Acks a good message; gives the poison back as $mode says.
function handle(AMQPQueue $queue, AMQPEnvelope $envelope, string $mode): void
{
    $tag = $envelope->getDeliveryTag();
    handle_delivery($envelope->getBody(), $envelope->isRedelivery(), $mode,
                    fn(string $how) => match ($how) {
                        'ack' => $queue->ack($tag),
                        'reject' => $queue->reject($tag, AMQP_REQUEUE),
                        'nack' => $queue->nack($tag, AMQP_REQUEUE),
                    });
}

// Consumes until the process is ended, or until the connection is lost (throws).
function consume(string $mode): void
{
    $channel = connect();
    $channel->setPrefetchCount((int) env('COMPAT_PREFETCH'));
    $queue = open_queue($channel);
    $queue->declareQueue();
    $queue->consume(null); // basic.consume alone, then wait for deliveries below
    event('start');
    $queue->consume(function (AMQPEnvelope $envelope, AMQPQueue $queue) use ($mode) {
        handle($queue, $envelope, $mode);
        return true;
    }, AMQP_JUST_CONSUME);
    throw new RuntimeException('AMQPQueue::consume returned');
}

function reconnecting(): void
{
    for ($attempt = 0; ; $attempt++) {
        try {
            consume('nack');
        } catch (AMQPException $e) {
            // The broker's connection.close reaches a worker waiting in consume() as a bare
            // AMQPException "Library error: channel mismatch" (rabbitmq-c sees the close on
            // channel 0, not the consumer's), directly and through nackguard alike.
            if ($attempt > 50) {
                throw $e;
            }
            event('lost', $e->getCode(), $e->getMessage());
            usleep(200000); // the worker's back-off before it connects again
        }
    }
}

function poll(): void
{
    $channel = connect();
    $channel->setPrefetchCount((int) env('COMPAT_PREFETCH'));
    $queue = open_queue($channel);
    event('start');
    for ($n = 1; ; $n++) {
        event('get', $n);
        $envelope = $queue->get(AMQP_NOPARAM);
        if ($envelope === false) {
            event('empty', $n);
            usleep(20000); // the poller's interval on an empty queue
            continue;
        }
        event('got', $n);
        handle($queue, $envelope, 'get');
    }
}

function describe(AMQPEnvelope $e): string
{
    $headers = $e->getHeaders();
    ksort($headers);
    $pairs = [];
    foreach ($headers as $k => $v) {
        $pairs[] = $k . '=' . gettype($v) . ':' . var_export($v, true);
    }
    return sprintf('tag=%d redelivered=%s exchange=\'%s\' key-is-queue=%s body=%s content-type=%s '
        . 'encoding=%s mode=%s priority=%s correlation=%s reply-to=%s expiration=%s message-id=%s '
        . 'timestamp=%s type=%s user=%s app=%s headers={%s}',
        $e->getDeliveryTag(), var_export($e->isRedelivery(), true), $e->getExchangeName(),
        var_export($e->getRoutingKey() === env('COMPAT_QUEUE'), true), $e->getBody(),
        $e->getContentType(), $e->getContentEncoding(), $e->getDeliveryMode(), $e->getPriority(),
        $e->getCorrelationId(), $e->getReplyTo(), $e->getExpiration(), $e->getMessageId(),
        $e->getTimestamp(), $e->getType(), $e->getUserId(), $e->getAppId(), implode(',', $pairs));
}

// The client's common API once, written as "t ..." events.
function traffic(): void
{
    $channel = connect();
    $queue = open_queue($channel);
    event('t', 'declare-ok', $queue->declareQueue());
    $count = 10;
    $acked = 0;
    $nacked = 0;
    $channel->setConfirmCallback(
        function (int $tag, bool $multiple) use (&$acked, $count) {
            $acked = $multiple ? $tag : $acked + 1;
            return $acked < $count; // false: stop waiting
        },
        function (int $tag, bool $multiple, bool $requeue) use (&$nacked) {
            $nacked++;
            return false;
        });
    $channel->confirmSelect();
    $exchange = new AMQPExchange($channel); // the default exchange
    for ($i = 1; $i <= $count; $i++) {
        $exchange->publish(sprintf('traffic-%02d', $i), env('COMPAT_QUEUE'), AMQP_MANDATORY, [
            'content_type' => 'text/plain', 'content_encoding' => 'utf-8',
            'headers' => ['n' => $i, 's' => 'text', 'b' => true, 'f' => 1.5],
            'delivery_mode' => 2, 'priority' => 1, 'correlation_id' => "c-$i",
            'reply_to' => 'replies', 'message_id' => "m-$i", 'timestamp' => 1700000000 + $i,
            'type' => 'compat', 'app_id' => 'php_amqp_consumer',
        ]);
    }
    $channel->waitForConfirm(10.0);
    event('t', 'confirms', $acked, 'nacked', $nacked);
    $got = $queue->get(AMQP_NOPARAM);
    if ($got === false) {
        throw new RuntimeException("basic.get: empty after publishing $count");
    }
    event('t', 'get-ok', describe($got));
    $queue->ack($got->getDeliveryTag());
    $channel->qos(0, 5);
    event('t', 'qos-ok');
    $seen = 1;
    $queue->consume(function (AMQPEnvelope $e, AMQPQueue $queue) use (&$seen, $count) {
        $seen++;
        event('t', 'deliver', describe($e));
        if ($seen % 3 === 1 || $seen === $count) { // every third one acks the ones before it too
            $queue->ack($e->getDeliveryTag(), AMQP_MULTIPLE);
        }
        return $seen < $count; // false: stop waiting
    }, AMQP_NOPARAM, 'compat-traffic');
    $queue->cancel('compat-traffic');
    event('t', 'cancel-ok');
    if ($queue->get(AMQP_NOPARAM) !== false) {
        throw new RuntimeException('basic.get on the emptied queue got a message');
    }
    event('t', 'get-empty');
    event('t', 'left', open_queue($channel, AMQP_PASSIVE)->declareQueue());
    $channel->getConnection()->disconnect();
    event('stop');
}

run_client($argv, function (string $mode): void {
    switch ($mode) {
        case 'get': poll(); break;
        case 'traffic': traffic(); break;
        case 'reconnect': reconnecting(); break;
        default: consume($mode);
    }
});
