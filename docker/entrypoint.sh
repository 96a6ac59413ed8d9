#!/usr/bin/env bash
# Entrypoint of the leaguezero images: the first argument is the role, the rest go to it.
#
#   infer   [yz infer-server args]  one inference server per GPU in $GPUS (default "0") on TCP
#                                   ports $INFER_PORT, $INFER_PORT+1, ... (default 7777); every
#                                   server serves $MODEL (default: a fresh net, "dummy")
#   worker  [yz selfplay args]      with $RAY_ADDRESS: join that Ray cluster as a worker node;
#                                   without: run `yz selfplay` against --infer tcp://h1:p,...
#   trainer [yz run args]           the loop's driver and trainer: `yz run` (add --backend ray
#                                   and --set run.ray_address=... to use a cluster)
#   head    [yz run args]           start a Ray head in this container, then `yz run --backend ray`
#   shell / any other command       run it as is
set -euo pipefail

role="${1:-shell}"
shift || true

case "$role" in
  infer)
    port="${INFER_PORT:-7777}"
    pids=()
    for gpu in ${GPUS:-0}; do
      CUDA_VISIBLE_DEVICES="$gpu" yz infer-server --model "${MODEL:-dummy}" \
        --bind "tcp://0.0.0.0:${port}" --device cuda --public \
        --metrics-port "$((port + 1000))" "$@" &
      pids+=("$!")
      port=$((port + 1))
    done
    # One server dying ends the container, so the orchestrator restarts it; clients fail over
    # to the other servers meanwhile and reconnect when it is back.
    trap 'kill -TERM "${pids[@]}" 2>/dev/null || true' TERM INT
    set +e
    wait -n "${pids[@]}"
    status=$?
    kill -TERM "${pids[@]}" 2>/dev/null
    wait
    exit "$status"
    ;;
  worker)
    if [ -n "${RAY_ADDRESS:-}" ]; then
      exec ray start --address="$RAY_ADDRESS" --block --disable-usage-stats "$@"
    fi
    exec yz selfplay "$@"
    ;;
  trainer)
    exec yz run "$@"
    ;;
  head)
    ray start --head --port="${RAY_PORT:-6379}" --disable-usage-stats --include-dashboard=false
    export RAY_ADDRESS="127.0.0.1:${RAY_PORT:-6379}"
    exec yz run --backend ray "$@"
    ;;
  shell)
    exec bash
    ;;
  *)
    exec "$role" "$@"
    ;;
esac
