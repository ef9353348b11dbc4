<?php
// Compatibility client: php-amqplib (Debian php-amqplib), the pure-PHP AMQP client, as a PHP
// worker uses it. tests/compat/compat_languages.py runs it as
//
//   php php_consumer.php MODE
//
// with COMPAT_URL, COMPAT_QUEUE, COMPAT_POISON, COMPAT_EVENTS, COMPAT_PREFETCH and
// COMPAT_QUEUE_TYPE set. MODE is one of (every mode acks the good messages):
//   nack       consume; the poison gets basic.nack(requeue=true)
//   reject     consume; the poison gets basic.reject(requeue=true)
//   crash      consume; exit(17) as soon as it gets the poison (PHP runs its destructors
//              on the way out: php-amqplib sends connection.close, unacked messages in hand)
//   get        poll with basic.get; the poison gets basic.reject(requeue=true)
//   reconnect  consume as nack does; on a lost connection, connect again (the usual
//              catch-and-reconnect loop of a PHP worker: php-amqplib has no recovery)
//   traffic    declare, publish with confirms, basic.get, qos, consume and ack, cancel: a
//              transcript ("t ..." events) to compare directly and through nackguard
// Events are the lines of tests/compat/clients/events.py, plus "crash LABEL", "get N",
// "empty N", "lost TEXT" and "t ...". Runs until SIGTERM (traffic: until done), then closes
// and exits 0; exits 1 on any error, after an "error" event.

require_once '/usr/share/php/PhpAmqpLib/autoload.php';

use PhpAmqpLib\Connection\AMQPConnectionConfig;
use PhpAmqpLib\Connection\AMQPConnectionFactory;
use PhpAmqpLib\Exception\AMQPConnectionClosedException;
use PhpAmqpLib\Exception\AMQPIOException;
use PhpAmqpLib\Exception\AMQPTimeoutException;
use PhpAmqpLib\Message\AMQPMessage;
use PhpAmqpLib\Wire\AMQPTable;

const CLIENT_NAME = 'php-amqplib';
require_once __DIR__ . '/php_events.php';

function connect()
{
    $url = parse_url(env('COMPAT_URL'));
    $config = new AMQPConnectionConfig();
    $config->setHost($url['host']);
    $config->setPort($url['port']);
    $config->setUser(urldecode($url['user']));
    $config->setPassword(urldecode($url['pass']));
    $config->setVhost(urldecode(substr($url['path'] ?? '/', 1)) ?: '/');
    $config->setConnectionName('compat ' . env('COMPAT_QUEUE'));
    $config->setHeartbeat(0);
    return AMQPConnectionFactory::create($config);
}

function queue_arguments(): AMQPTable
{
    $quorum = getenv('COMPAT_QUEUE_TYPE') === 'quorum';
    return new AMQPTable($quorum ? ['x-queue-type' => 'quorum'] : []);
}

// Acks a good message; gives the poison back as $mode says.
function handle(AMQPMessage $message, string $mode): void
{
    handle_delivery($message->getBody(), $message->isRedelivered(), $mode,
                    fn(string $how) => match ($how) {
                        'ack' => $message->ack(),
                        'reject' => $message->reject(true),
                        'nack' => $message->nack(true),
                    });
}

$stopping = false;
pcntl_async_signals(true);
pcntl_signal(SIGTERM, function () use (&$stopping) { $stopping = true; });

// Consumes on one connection until SIGTERM (returns) or until the connection is lost (throws).
function consume(string $mode, bool &$stopping): void
{
    $connection = connect();
    $channel = $connection->channel();
    $channel->basic_qos(0, (int) env('COMPAT_PREFETCH'), false);
    $channel->queue_declare(env('COMPAT_QUEUE'), false, true, false, false, false,
                            queue_arguments());
    $tag = $channel->basic_consume(env('COMPAT_QUEUE'), '', false, false, false, false,
        fn(AMQPMessage $message) => handle($message, $mode));
    event('start');
    while (!$stopping) {
        try {
            $channel->wait(null, false, 0.5);
        } catch (AMQPTimeoutException $e) {
            // idle: look at $stopping again
        }
    }
    $channel->basic_cancel($tag);
    $channel->close();
    $connection->close();
    event('stop');
}

function reconnecting(bool &$stopping): void
{
    for ($attempt = 0; !$stopping; $attempt++) {
        try {
            consume('nack', $stopping);
            return;
        } catch (AMQPConnectionClosedException | AMQPIOException $e) {
            if ($attempt > 50) {
                throw $e;
            }
            event('lost', $e->getCode(), $e->getMessage());
            usleep(200000); // the worker's back-off before it connects again
        }
    }
}

function poll(bool &$stopping): void
{
    $connection = connect();
    $channel = $connection->channel();
    $channel->basic_qos(0, (int) env('COMPAT_PREFETCH'), false);
    event('start');
    for ($n = 1; !$stopping; $n++) {
        event('get', $n);
        $message = $channel->basic_get(env('COMPAT_QUEUE'), false);
        if ($message === null) {
            event('empty', $n);
            usleep(20000); // the poller's interval on an empty queue
            continue;
        }
        event('got', $n);
        handle($message, 'get');
    }
    $channel->close();
    $connection->close();
    event('stop');
}

function describe(AMQPMessage $m): string
{
    $props = $m->get_properties();
    $headers = isset($props['application_headers'])
        ? $props['application_headers']->getNativeData() : [];
    ksort($headers);
    $pairs = [];
    foreach ($headers as $k => $v) {
        $pairs[] = $k . '=' . gettype($v) . ':' . var_export($v, true);
    }
    unset($props['application_headers']);
    ksort($props);
    $fields = [];
    foreach ($props as $k => $v) {
        $fields[] = $k . '=' . var_export($v, true);
    }
    return sprintf('tag=%d redelivered=%s exchange=\'%s\' key-is-queue=%s body=%s %s headers={%s}',
        $m->getDeliveryTag(), var_export($m->isRedelivered(), true), $m->getExchange(),
        var_export($m->getRoutingKey() === env('COMPAT_QUEUE'), true), $m->getBody(),
        implode(' ', $fields), implode(',', $pairs));
}

// The client's common API once, written as "t ..." events.
function traffic(): void
{
    $queue = env('COMPAT_QUEUE');
    $connection = connect();
    $channel = $connection->channel();
    [$name, $messages, $consumers] = $channel->queue_declare($queue, false, true, false, false,
                                                             false, queue_arguments());
    event('t', 'declare-ok', $name === $queue, $messages, $consumers);
    $acked = [];
    $nacked = 0;
    $channel->set_ack_handler(function (AMQPMessage $m) use (&$acked) {
        $acked[] = $m->getDeliveryTag();
    });
    $channel->set_nack_handler(function (AMQPMessage $m) use (&$nacked) { $nacked++; });
    $channel->confirm_select();
    $count = 10;
    for ($i = 1; $i <= $count; $i++) {
        $message = new AMQPMessage(sprintf('traffic-%02d', $i), [
            'content_type' => 'text/plain', 'content_encoding' => 'utf-8',
            'application_headers' => new AMQPTable(
                ['n' => $i, 's' => 'text', 'b' => true, 'f' => 1.5]),
            'delivery_mode' => AMQPMessage::DELIVERY_MODE_PERSISTENT, 'priority' => 1,
            'correlation_id' => "c-$i", 'reply_to' => 'replies', 'message_id' => "m-$i",
            'timestamp' => 1700000000 + $i, 'type' => 'compat', 'app_id' => 'php_consumer',
        ]);
        $channel->basic_publish($message, '', $queue, true);
    }
    $channel->wait_for_pending_acks(10);
    sort($acked);
    event('t', 'confirms', implode(',', $acked), 'nacked', $nacked);
    $got = $channel->basic_get($queue, false);
    if ($got === null) {
        throw new RuntimeException("basic.get: empty after publishing $count");
    }
    event('t', 'get-ok', $got->getMessageCount(), describe($got));
    $got->ack();
    $channel->basic_qos(0, 5, false);
    event('t', 'qos-ok');
    $deliveries = [];
    $channel->basic_consume($queue, 'compat-traffic', false, false, false, false,
        function (AMQPMessage $m) use (&$deliveries) { $deliveries[] = $m; });
    for ($i = 2; $i <= $count; $i++) {
        while (!$deliveries) {
            $channel->wait(null, false, 10);
        }
        $m = array_shift($deliveries);
        event('t', 'deliver', describe($m));
        if ($i % 3 === 1 || $i === $count) { // every third one acks the ones before it too
            $m->ack(true);
        }
    }
    $channel->basic_cancel('compat-traffic');
    event('t', 'cancel-ok');
    if ($channel->basic_get($queue, false) !== null) {
        throw new RuntimeException('basic.get on the emptied queue got a message');
    }
    event('t', 'get-empty');
    [, $messages, $consumers] = $channel->queue_declare($queue, true);
    event('t', 'left', $messages, $consumers);
    $channel->close();
    $connection->close();
    event('stop');
}

run_client($argv, function (string $mode) use (&$stopping): void {
    switch ($mode) {
        case 'get': poll($stopping); break;
        case 'traffic': traffic(); break;
        case 'reconnect': reconnecting($stopping); break;
        default: consume($mode, $stopping);
    }
});
