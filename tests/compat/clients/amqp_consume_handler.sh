#!/bin/sh
# The command tests/compat/compat.py gives amqp-consume (Debian's amqp-tools, rabbitmq-c):
# amqp-consume runs it once per message with the body on stdin, acks the message if it exits
# 0, and otherwise sends NOTHING (no nack, no reject): the message stays unacked on the
# channel until the channel or connection ends. Fails (exit 1) on the poison.
# Appends the events described in events.py to $COMPAT_EVENTS ("fail" instead of "return":
# a failure here gives nothing back to the broker).
label=$(cat)
printf 'deliver %s ?\n' "$label" >>"$COMPAT_EVENTS"
if [ "$label" = "$COMPAT_POISON" ]; then
  printf 'fail %s\n' "$label" >>"$COMPAT_EVENTS"
  exit 1
fi
printf 'ack %s\n' "$label" >>"$COMPAT_EVENTS"
exit 0
