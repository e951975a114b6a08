#!/usr/bin/env bash
# What the test suite needs beyond the venv, set up idempotently: `make test` runs this first.
#
# The suite runs every tier against real parts: PostgreSQL's server, bubblewrap (local sandboxes),
# a Docker daemon with the offline base image and the harness images (docker sandboxes), the six
# real agents (OpenCode, pi, Hermes, Claude Code, Codex CLI, Qwen Code) and Debian's chromium (the viewer's browser tests). As root, each
# missing part is installed (seconds when all are there); otherwise the missing parts are listed with
# the one command that installs them, and the script fails: a run that skips them would prove less
# than it claims.
#
# Usage: tests/setup_machine.sh [demo]   (demo: only what `make demo` needs: bubblewrap and pi)
set -euo pipefail
cd "$(dirname "$0")/.."

OPENCODE_VERSION=1.18.33  # pins: harnesses/agents/*.py VERSION
PI_VERSION=0.73.1
HERMES_VERSION=0.19.0
CLAUDE_CODE_VERSION=2.1.332
CODEX_VERSION=0.171.0
QWEN_CODE_VERSION=0.24.4
HERMES_VENV=/opt/hermes
what=${1:-test}

log() { echo "setup: $*" >&2; }

missing_packages() {
    local need=()
    command -v bwrap >/dev/null || need+=(bubblewrap)
    if [ "$what" = test ]; then
        command -v make >/dev/null || need+=(make)
        ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || need+=(postgresql)
        command -v chromium >/dev/null || need+=(chromium fonts-liberation)
        # validates docker/compose.yaml (compose v2 where Docker ships it, else Debian's v1)
        { docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null; } || need+=(docker-compose)
        command -v podman >/dev/null || need+=(podman)  # Harbor's podman type (--sandbox harbor:podman)
    fi
    echo "${need[@]}"
}

missing_agents() {
    local need=()
    [ "$(pi --version 2>&1)" = "$PI_VERSION" ] || need+=(pi)
    [ "$what" = test ] || { echo "${need[@]}"; return; }  # the demo runs pi alone
    [ "$(opencode --version 2>/dev/null)" = "$OPENCODE_VERSION" ] || need+=(opencode)
    # with its mcp extra: MCP servers in its config (OpenEnv environments' tools)
    { [ -x "$HERMES_VENV/bin/hermes" ] && "$HERMES_VENV/bin/python" -c "import mcp" 2>/dev/null; } || need+=(hermes)
    [ "$(claude --version 2>/dev/null)" = "$CLAUDE_CODE_VERSION (Claude Code)" ] || need+=(claude-code)
    [ "$(codex --version 2>/dev/null)" = "codex-cli $CODEX_VERSION" ] || need+=(codex)
    [ "$(qwen --version 2>/dev/null)" = "$QWEN_CODE_VERSION" ] || need+=(qwen-code)
    echo "${need[@]}"
}

if [ "$(id -u)" -ne 0 ]; then
    packages=$(missing_packages)
    agents=$(missing_agents)
    docker_down=""
    [ "$what" = test ] && ! docker info >/dev/null 2>&1 && docker_down="a running Docker daemon"
    if [ -n "$packages$agents$docker_down" ]; then
        log "missing: ${packages:+packages $packages; }${agents:+agents $agents; }${docker_down}"
        log "run once as root: sudo tests/setup_machine.sh $what"
        exit 1
    fi
    exit 0
fi

packages=$(missing_packages)
if [ -n "$packages" ]; then
    log "installing $packages"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    # shellcheck disable=SC2086  # a word list
    apt-get install -y -q --no-install-recommends $packages
fi
[ "$what" = test ] && bash docker/setup-daemon.sh  # dockerd (no bridge) and the offline debian:bookworm-slim base image
# podman: a runtime and ulimits under which a container starts on this host, found by starting one and
# written to a containers.conf drop-in (sandboxes/podman_host.py). Machines of this kind differ: podman's
# default ulimits are above their hard limits, and where crun refuses the cgroup layout runc starts.
if [ "$what" = test ]; then
    base=${HARNESSRL_BASE_IMAGE:-debian:bookworm-slim}  # docker/setup-daemon.sh built it
    podman image exists "$base" || docker save "$base" | podman load -q >/dev/null
    .venv/bin/python -m sandboxes.podman_host --image "$base" \
        || { log "podman cannot start a container on this host (above): --sandbox harbor:podman would fail"; exit 1; }
fi

for agent in $(missing_agents); do
    log "installing $agent"
    case $agent in
        opencode) npm install -g "opencode-ai@$OPENCODE_VERSION" ;;
        pi) npm install -g "@mariozechner/pi-coding-agent@$PI_VERSION" ;;
        hermes) python3 -m venv "$HERMES_VENV" && "$HERMES_VENV/bin/pip" install -q "hermes-agent[mcp]==$HERMES_VERSION" ;;
        claude-code) npm install -g "@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION" ;;
        codex) npm install -g "@openai/codex@$CODEX_VERSION" ;;
        qwen-code) npm install -g "@qwen-code/qwen-code@$QWEN_CODE_VERSION" ;;
    esac
done

[ "$what" = test ] || exit 0

# The harness images for docker sandboxes (layer cache: seconds when they are current).
.venv/bin/harnessrl images build >/dev/null
