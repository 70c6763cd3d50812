# shellcheck shell=bash
# Shared helpers for delayq's scripts. Source it, don't run it:
#
#     source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"
#
# Safe under `set -euo pipefail`. Every helper returns non-zero on failure
# (explicitly, since `set -e` is switched off inside functions called from an
# `if` or `||`).
#
# Environment:
#   ROOT             repo root (default: the parent of this file's directory)
#   DELAYQ_PYTHON    interpreter used to create .venv (default: first python3.x >= 3.11)
#   REDIS_URL        if set, delayq_start_private_redis uses it and starts nothing

if [[ -z "${ROOT:-}" ]]; then
    ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
fi

_delayq_log() { printf 'delayq: %s\n' "$*" >&2; }

# Print the path of a Python >= 3.11, or fail.
delayq_find_python() {
    local candidate
    for candidate in "${DELAYQ_PYTHON:-}" python3.13 python3.12 python3.11 python3 python; do
        [[ -n "$candidate" ]] || continue
        command -v "$candidate" >/dev/null 2>&1 || continue
        if "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            command -v "$candidate"
            return 0
        fi
    done
    _delayq_log "no Python >= 3.11 found (set DELAYQ_PYTHON to one)"
    return 1
}

# Create $ROOT/.venv and install the project (editable) with its dev extras.
# The install is skipped while the sha256 of pyproject.toml matches the stamp
# left by the last successful install, so repeated runs cost nothing.
delayq_setup_venv() {
    local venv="$ROOT/.venv"
    local stamp="$venv/.delayq-pyproject.sha256"
    local python want
    if ! "$venv/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
        # Missing, broken (dangling interpreter symlink) or too old: rebuild.
        python="$(delayq_find_python)" || return 1
        _delayq_log "creating $venv with $python"
        "$python" -m venv --clear "$venv" || return 1
    fi
    if ! "$venv/bin/python" -c 'import pip' 2>/dev/null; then
        # A venv made with --without-pip (or whose pip was removed) cannot install anything.
        _delayq_log "$venv has no pip; bootstrapping it with ensurepip"
        "$venv/bin/python" -m ensurepip -q || return 1
        rm -f "$stamp"
    fi
    want="$("$venv/bin/python" -c \
        'import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())' \
        "$ROOT/pyproject.toml")" || return 1
    if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
        return 0
    fi
    _delayq_log "installing delayq[dev] into $venv"
    (cd "$ROOT" && "$venv/bin/python" -m pip install -q --disable-pip-version-check -e ".[dev]") \
        || return 1
    printf '%s\n' "$want" >"$stamp"
}

# apt-get install the packages named (apt-get options may come first) without starting
# their services: policy-rc.d exiting 101 tells invoke-rc.d not to start a service from a
# package's postinst (matters where there is no systemd).  Returns apt-get's status.
_delayq_apt_install() {
    local policy=/usr/sbin/policy-rc.d made_policy=0 rc=0
    if [[ ! -e "$policy" ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && made_policy=1
    fi
    if apt-get update -qq \
        && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null; then
        rc=0
    else
        rc=$?
    fi
    if [[ "$made_policy" -eq 1 ]]; then rm -f "$policy"; fi
    return "$rc"
}

# Make sure redis-server >= 7.0 is on PATH, installing Debian's package when
# we are root. The package's service is NOT started: tests and scripts start
# their own private servers.
delayq_ensure_redis_server() {
    local version major rc=0
    if ! command -v redis-server >/dev/null 2>&1; then
        if [[ "$EUID" -ne 0 ]]; then
            _delayq_log "redis-server (>= 7.0) is not installed."
            _delayq_log "Install it (e.g. 'sudo apt-get install redis-server'), or, for scripts that"
            _delayq_log "only need a running server, set REDIS_URL=redis://HOST:PORT/0."
            _delayq_log "The test suite starts its own servers and needs the binary."
            return 1
        fi
        _delayq_log "redis-server not found; installing Debian's redis-server package"
        _delayq_apt_install redis-server || {
            rc=$?
            _delayq_log "apt-get install redis-server failed ($rc)"
            return "$rc"
        }
    fi
    version="$(redis-server --version)" || return 1
    major="$(sed -n 's/.* v=\([0-9][0-9]*\)\..*/\1/p' <<<"$version")"
    if [[ -z "$major" || "$major" -lt 7 ]]; then
        _delayq_log "redis-server >= 7.0 required, found: $version"
        return 1
    fi
}

# Stop the server started by delayq_start_private_redis (EXIT trap).
_delayq_stop_private_redis() {
    if [[ -n "${DELAYQ_REDIS_PID:-}" ]]; then
        kill "$DELAYQ_REDIS_PID" 2>/dev/null || true
        wait "$DELAYQ_REDIS_PID" 2>/dev/null || true
        DELAYQ_REDIS_PID=""
    fi
    if [[ -n "${DELAYQ_REDIS_DIR:-}" ]]; then
        rm -rf "$DELAYQ_REDIS_DIR"
        DELAYQ_REDIS_DIR=""
    fi
}

# Does the Redis at 127.0.0.1:$1 answer PING?
_delayq_ping() {
    local port="$1"
    if command -v redis-cli >/dev/null 2>&1; then
        [[ "$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" == "PONG" ]]
    elif [[ -x "$ROOT/.venv/bin/python" ]]; then
        "$ROOT/.venv/bin/python" -c \
            'import redis, sys; redis.Redis(port=int(sys.argv[1]), socket_timeout=0.5, retry=None).ping()' \
            "$port" >/dev/null 2>&1
    else
        _delayq_log "neither redis-cli nor $ROOT/.venv (run delayq_setup_venv first)"
        return 2
    fi
}

# Export REDIS_URL pointing at a private, non-persistent redis-server on a free
# loopback port, killed when this shell exits. With REDIS_URL already set,
# use that and start nothing. Call it in the script's own shell (not in `$(...)`
# or a pipeline), and don't `exec` afterwards: the EXIT trap is what stops it.
delayq_start_private_redis() {
    local python port dir pid i prev_trap rc
    if [[ -n "${REDIS_URL:-}" ]]; then
        _delayq_log "using REDIS_URL=$REDIS_URL"
        return 0
    fi
    delayq_ensure_redis_server || return 1
    python="$ROOT/.venv/bin/python"
    [[ -x "$python" ]] || python="$(delayq_find_python)" || return 1
    port="$("$python" -c \
        'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')" \
        || return 1
    dir="$(mktemp -d "${TMPDIR:-/tmp}/delayq-redis.XXXXXX")" || return 1
    redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
        --dir "$dir" --daemonize no --logfile "$dir/redis.log" </dev/null >/dev/null 2>&1 &
    pid=$!
    DELAYQ_REDIS_PID="$pid"
    DELAYQ_REDIS_DIR="$dir"

    # Chain onto any EXIT trap the caller already has instead of replacing it.
    prev_trap="$(trap -p EXIT)"
    if [[ -n "$prev_trap" ]]; then
        eval "set -- $prev_trap" # -> trap -- 'COMMAND' EXIT
        # shellcheck disable=SC2064  # expand the old command now, on purpose
        trap "_delayq_stop_private_redis; $3" EXIT
    else
        trap _delayq_stop_private_redis EXIT
    fi
    # Without these, Ctrl-C or a TERM would kill the shell without running the
    # EXIT trap; `exit` from a signal trap does run it. Keep the caller's own.
    [[ -n "$(trap -p INT)" ]] || trap 'exit 130' INT
    [[ -n "$(trap -p TERM)" ]] || trap 'exit 143' TERM

    for ((i = 0; i < 100; i++)); do
        if ! kill -0 "$pid" 2>/dev/null; then
            _delayq_log "redis-server exited at startup:"
            tail -n 20 "$dir/redis.log" >&2 || true
            _delayq_stop_private_redis
            return 1
        fi
        if _delayq_ping "$port"; then
            export REDIS_URL="redis://127.0.0.1:$port/0"
            _delayq_log "private redis-server (pid $pid) at $REDIS_URL"
            return 0
        else
            rc=$?
            [[ "$rc" -ne 2 ]] || { _delayq_stop_private_redis; return 1; }
        fi
        sleep 0.1
    done
    _delayq_log "redis-server did not answer PING within 10s:"
    tail -n 20 "$dir/redis.log" >&2 || true
    _delayq_stop_private_redis
    return 1
}

# Make sure Debian's Chromium is at /usr/bin/chromium for the dashboard's browser tests
# (Playwright drives it through executable_path: no browser is ever downloaded), installing
# the `chromium` package when we are root, as for redis-server.  Never fails: without it the
# browser tests are skipped, and say why.
delayq_ensure_chromium() {
    if [[ -x /usr/bin/chromium ]]; then
        return 0
    fi
    if [[ "$EUID" -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
        _delayq_log "no /usr/bin/chromium and cannot install it (needs root and apt-get):"
        _delayq_log "the browser tests will be skipped (apt-get install chromium to run them)"
        return 0
    fi
    _delayq_log "installing Debian's chromium package (for the dashboard's browser tests)"
    if ! { apt-get update -qq \
        && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }; then
        _delayq_log "apt-get install chromium failed: the browser tests will be skipped"
    fi
    return 0
}

# Make sure promtool (Debian's `prometheus` package) is on PATH for the tests of contrib/'s
# Prometheus rules, installing the package when we are root, as for Chromium; its service is
# not started.  Never fails: without it those tests are skipped, and say why.
delayq_ensure_promtool() {
    if command -v promtool >/dev/null 2>&1; then
        return 0
    fi
    if [[ "$EUID" -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
        _delayq_log "no promtool and cannot install it (needs root and apt-get):"
        _delayq_log "the Prometheus rules' tests will be skipped (apt-get install prometheus to run them)"
        return 0
    fi
    _delayq_log "installing Debian's prometheus package (promtool, for the rules' tests)"
    _delayq_apt_install --no-install-recommends prometheus \
        || _delayq_log "apt-get install prometheus failed: the rules' tests will be skipped"
    return 0
}

# --- release checks: the lowest dependency versions, and the built wheel ---------------------

# Print the sha256 of pyproject.toml (the cache key of the virtualenvs below).
_delayq_pyproject_sha() {
    "$1" -c 'import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())' \
        "$ROOT/pyproject.toml"
}

# Create $ROOT/.venv-lowest: each core dependency at the lower bound pyproject.toml gives it
# (scripts/lowest_pins.py), the test tools, and delayq itself (editable, no dependencies).
# Rebuilt only when pyproject.toml changes, like .venv.
delayq_setup_lowest_venv() {
    local venv="$ROOT/.venv-lowest"
    local stamp="$venv/.delayq-pyproject.sha256"
    local python want
    python="$(delayq_find_python)" || return 1
    want="$(_delayq_pyproject_sha "$python")" || return 1
    if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]] \
        && "$venv/bin/python" -c 'import delayq' 2>/dev/null; then
        return 0
    fi
    _delayq_log "creating $venv (core dependencies at their lower bounds)"
    "$python" -m venv --clear "$venv" || return 1
    "$python" "$ROOT/scripts/lowest_pins.py" "$ROOT/pyproject.toml" >"$venv/lowest.txt" || return 1
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$venv/lowest.txt" \
        || return 1
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps -e "$ROOT" \
        || return 1
    printf '%s\n' "$want" >"$stamp"
}

# Build the sdist and, from it, the wheel into $ROOT/dist-check; `twine check` both; install
# the wheel with every extra into $ROOT/.venv-wheel, and run what a user runs first from
# outside the source tree: `delayq --version`, the extensions' imports and the demo (on
# $REDIS_URL: call delayq_start_private_redis first).  The venv's dependencies are kept
# while pyproject.toml is unchanged; the wheel itself is reinstalled every time.
delayq_check_wheel() {
    local dist="$ROOT/dist-check" venv="$ROOT/.venv-wheel"
    local stamp="$venv/.delayq-pyproject.sha256"
    local python want wheel version
    python="$(delayq_find_python)" || return 1
    rm -rf "$dist"
    "$ROOT/.venv/bin/python" -m build -q --outdir "$dist" "$ROOT" >/dev/null || return 1
    "$ROOT/.venv/bin/python" -m twine check --strict "$dist"/* || return 1
    wheel="$(ls "$dist"/delayq-*.whl)" || return 1
    want="$(_delayq_pyproject_sha "$python")" || return 1
    if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
        "$venv/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall \
            --no-deps "$wheel" || return 1
    else
        _delayq_log "creating $venv from the wheel with every extra"
        "$python" -m venv --clear "$venv" || return 1
        "$venv/bin/python" -m pip install -q --disable-pip-version-check \
            "$wheel[web,prometheus,otel,archive]" || return 1
        printf '%s\n' "$want" >"$stamp"
    fi
    "$venv/bin/python" -m pip check -q >/dev/null || { "$venv/bin/python" -m pip check; return 1; }
    version="$(cd "$venv" && bin/delayq --version)" || return 1
    [[ "$version" == "delayq $(cd "$venv" && bin/python -c 'import delayq; print(delayq.__version__)')" ]] \
        || { _delayq_log "delayq --version said: $version"; return 1; }
    printf '%s\n' "$version"
    (cd "$venv" && bin/python -c \
        'import delayq, delayq.web, delayq.metrics, delayq.otel, delayq.archive, sys
assert delayq.__file__.startswith(sys.prefix), delayq.__file__  # the wheel, not the source tree') \
        || return 1
    (cd "$venv" && bin/python "$ROOT/examples/demo.py" >"$venv/demo.log" 2>&1) \
        || { tail -n 30 "$venv/demo.log" >&2; return 1; }
    tail -n 3 "$venv/demo.log"
}
