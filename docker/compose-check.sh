#!/usr/bin/env bash
# The compose stack, checked end to end on this host (run on demand: `make compose-check`): builds the
# stack image from the local base image, brings up docker/compose.yaml (PostgreSQL, 2 engines, 2
# gateways, 2 workers, the learner) on a fresh project, waits until both workers have played the run
# (exit 0) with no rollout left running, the learner has published a version and both engines serve it, prints the run's summary, then takes
# the stack down with its volumes. Exits non-zero naming what did not happen in time.
set -euo pipefail
cd "$(dirname "$0")/.."
project=${COMPOSE_PROJECT:-harnessrl-check}
timeout_s=${CHECK_TIMEOUT_S:-3600}
export HARNESSRL_ADMIN_KEY=${HARNESSRL_ADMIN_KEY:-$(openssl rand -hex 24)}
export RUN=${RUN:-compose-check}
compose=(docker compose)
docker compose version >/dev/null 2>&1 || compose=(docker-compose)  # Debian's compose v1 where v2 is absent
compose+=(-p "$project" -f docker/compose.yaml)

docker/stack-extras.sh
if ls docker/stack-extras/wheels/torch-*.whl >/dev/null 2>&1 && ! curl -fsI -m 10 https://download.pytorch.org/whl/cpu/ >/dev/null; then
    export TORCH_INDEX=  # the CPU wheel index is out of reach: torch comes from the local wheel
fi
if [ -z "${ENGINE_DTYPE:-}" ] && ! command -v nvidia-smi >/dev/null && ! grep -qw avx512_bf16 /proc/cpuinfo; then
    export ENGINE_DTYPE=float32  # a CPU without bfloat16 arithmetic (what `harnessrl serve` chooses there too)
fi
mkdir -p /tmp/harnessrl-sandboxes
trap '"${compose[@]}" logs --tail 30 >&2 || true; "${compose[@]}" down -v >/dev/null 2>&1 || true' EXIT
started=$(date +%s)
"${compose[@]}" up -d --build

get() {  # GET a gateway path with the admin key; empty on any error
    curl -fs -m 10 -H "x-admin-key: $HARNESSRL_ADMIN_KEY" "http://127.0.0.1:$1$2" || true
}
workers_done() {  # both workers exited 0: every slot of the run was played
    local id
    for service in worker-1 worker-2; do
        id=$("${compose[@]}" ps -q "$service")
        [ -n "$id" ] && [ "$(docker inspect -f '{{.State.Status}} {{.State.ExitCode}}' "$id")" = "exited 0" ] || return 1
    done
}
done_yet() {
    local summary version
    workers_done || return 1
    summary=$(get 8002 "/api/runs/$RUN/summary")
    version=$(get 8001 /admin/policy | python3 -c 'import json,sys; print(json.load(sys.stdin)["current_version"])' 2>/dev/null || echo 0)
    [ -n "$summary" ] && [ "$version" -ge 1 ] || return 1
    python3 - "$summary" "$version" <<'EOF'
import json, sys, urllib.request
summary, version = json.loads(sys.argv[1]), int(sys.argv[2])
served = all(
    f"policy-v{version}" in {m["id"] for m in json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models"))["data"]}
    for port in (8101, 8102)
)
sys.exit(0 if summary["rollouts"] and not summary["rollouts_by_status"].get("running") and served else 1)
EOF
}
until done_yet; do
    if (($(date +%s) - started > timeout_s)); then
        echo "compose-check: the run did not end with a published version on both engines within ${timeout_s}s" >&2
        get 8001 "/api/runs/$RUN/summary" >&2
        exit 1
    fi
    sleep 10
done
echo "compose-check: the stack came up and run $RUN went through it in $(($(date +%s) - started)) s"
get 8001 "/api/runs/$RUN/summary" | python3 -m json.tool
"${compose[@]}" ps
