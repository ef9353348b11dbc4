<?php
// What the two PHP compatibility clients (php_consumer.php, php-amqplib; php_amqp_consumer.php,
// the php-amqp extension) share: their modes, their exit code on a crash, their environment
// and the event lines of tests/compat/clients/events.py. CLIENT_NAME is the including
// client's name, for its error messages.

const CRASH_EXIT_CODE = 17;
const MODES = ['nack', 'reject', 'crash', 'get', 'reconnect', 'traffic'];

function env(string $name): string
{
    $value = getenv($name);
    if ($value === false || $value === '') {
        fwrite(STDERR, CLIENT_NAME . " client: $name is not set\n");
        exit(2);
    }
    return $value;
}

// One line per event, one write(2) each on an O_APPEND file: lines never interleave.
function event(...$words): void
{
    static $events = null;
    $events = $events ?? fopen(env('COMPAT_EVENTS'), 'a');
    $text = implode(' ', array_map(fn($w) => is_bool($w) ? ($w ? 'true' : 'false') : (string) $w,
                                   $words));
    $text = str_replace("\n", ' ', $text);
    fwrite($events, $text . "\n");
    fflush($events);
}

// The client's main: runs $run with the mode its one argument names (the usage and exit 2
// otherwise), then exits 0; on any failure, the finding, an error event, the exception on
// stderr and exit 1.
function run_client(array $argv, callable $run): never
{
    if (count($argv) !== 2 || !in_array($argv[1], MODES, true)) {
        fwrite(STDERR, 'usage: ' . basename($argv[0]) . ' ' . implode('|', MODES) . "\n");
        exit(2);
    }
    try {
        $run($argv[1]);
    } catch (Throwable $e) {
        event('error', get_class($e) . ': ' . $e->getMessage());
        fwrite(STDERR, CLIENT_NAME . ' client: ' . $e . "\n");
        exit(1);
    }
    exit(0);
}

// What both clients do with a delivery: ack a good message; give the poison back as $mode says
// (crash: exit CRASH_EXIT_CODE holding it; reject and get: basic.reject; otherwise basic.nack;
// with requeue). $settle('ack'), $settle('reject') or $settle('nack') does it on the client's
// library.
function handle_delivery(string $label, ?bool $redelivered, string $mode, callable $settle): void
{
    event('deliver', $label, $redelivered ? 1 : 0);
    if ($label !== env('COMPAT_POISON')) {
        $settle('ack');
        event('ack', $label);
        return;
    }
    if ($mode === 'crash') {
        event('crash', $label);
        exit(CRASH_EXIT_CODE);
    }
    $settle($mode === 'reject' || $mode === 'get' ? 'reject' : 'nack');
    event('return', $label);
}
