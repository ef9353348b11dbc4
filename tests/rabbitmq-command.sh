# shellcheck shell=bash disable=SC2034  # sets variables for the scripts that source it
# The command line and the saved settings of the scripts that manage private RabbitMQ nodes in
# a directory, tests/rabbitmq-node.sh and tests/rabbitmq-cluster.sh (sourced by both):
#
#   SCRIPT start|stop|status|env DIR
#
# `start` saves its settings in a file of DIR, one KEY=value line each, which the later actions
# on DIR read back.

# rabbitmq_dir_command ARG...: checks that the command line ARG... is `start|stop|status|env
# DIR`, else prints the usage and exits 2; sets `action`, and `dir`: DIR, made, as an absolute
# path.
rabbitmq_dir_command() {
  [[ $# -eq 2 ]] || rabbitmq_dir_usage
  action=$1
  case "$action" in start | stop | status | env) ;; *) rabbitmq_dir_usage ;; esac
  mkdir -p "$2"
  dir=$(cd "$2" && pwd)
}

# run_action: runs the sourcing script's do_start, do_stop, do_status or do_env, as `action`
# says; its status is theirs.
run_action() {
  case "$action" in
    start) do_start ;;
    stop) do_stop ;;
    status) do_status ;;
    env) do_env ;;
  esac
}

rabbitmq_dir_usage() {
  echo "usage: $0 start|stop|status|env DIR" >&2
  exit 2
}

# read_saved_settings FILE KEY...: sets saved_KEY for each KEY to its value in FILE (a line
# KEY=value), or to '' when FILE or the line is missing; other lines are ignored.
read_saved_settings() {
  local file=$1 key value wanted
  shift
  for wanted in "$@"; do printf -v "saved_$wanted" '%s' ''; done
  [[ -f $file ]] || return 0
  while IFS='=' read -r key value; do
    for wanted in "$@"; do
      if [[ $key == "$wanted" ]]; then printf -v "saved_$wanted" '%s' "$value"; fi
    done
  done <"$file"
}
