// Compatibility client: amqplib's promise API, acking good messages and answering the poison
// with basic.reject(requeue=true), as a naive consumer does on every failure.
//
// Environment: COMPAT_URL, COMPAT_QUEUE, COMPAT_POISON, COMPAT_EVENTS, COMPAT_PREFETCH.
// Runs until SIGTERM, then cancels, closes the connection and exits 0; exits 1 on any error.
// Events are the lines described in ../clients/events.py.
'use strict';

const fs = require('fs');
const amqp = require('amqplib');

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};
const eventsFd = fs.openSync(env('COMPAT_EVENTS'), 'a');
const event = (...words) => fs.writeSync(eventsFd, words.join(' ').replace(/\n/g, ' ') + '\n');

async function main() {
  const queue = env('COMPAT_QUEUE');
  const poison = env('COMPAT_POISON');
  let stopping = false;
  let failed = null;
  const fail = (what, err) => {
    if (stopping && !err) return;
    failed = failed || `${what}: ${err ? err.message || err : 'closed unexpectedly'}`;
  };

  const connection = await amqp.connect(env('COMPAT_URL'));
  connection.on('error', (err) => fail('connection error', err));
  connection.on('close', (err) => fail('connection closed', err));
  const channel = await connection.createChannel();
  channel.on('error', (err) => fail('channel error', err));
  channel.on('close', () => fail('channel closed'));
  await channel.prefetch(Number(process.env.COMPAT_PREFETCH || '10'));

  const { consumerTag } = await channel.consume(queue, (msg) => {
    if (msg === null) {
      fail('consumer cancelled by the broker');
      return;
    }
    const label = msg.content.toString();
    event('deliver', label, msg.fields.redelivered ? 1 : 0);
    if (label === poison) {
      channel.reject(msg, true);
      event('return', label);
    } else {
      channel.ack(msg);
      event('ack', label);
    }
  }, { noAck: false });
  event('start');

  await new Promise((resolve) => {
    process.on('SIGTERM', resolve);
    const poll = setInterval(() => {
      if (failed) {
        clearInterval(poll);
        resolve();
      }
    }, 100);
  });
  if (failed) throw new Error(failed);
  stopping = true;
  await channel.cancel(consumerTag);
  await channel.close();
  await connection.close();
  event('stop');
}

main().then(
  () => process.exit(0),
  (err) => {
    event('error', `${err.name}: ${err.message}`);
    console.error(`amqplib client: ${err.stack || err}`);
    process.exit(1);
  },
);
