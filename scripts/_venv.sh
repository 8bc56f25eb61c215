# Sourced by the other scripts: make .venv exist and hold this project installed.
# Usage: . scripts/_venv.sh EXTRAS   (EXTRAS like "test", "test,bench", or "" for none)
# Always give EXTRAS, even "": with no arguments a sourced script sees its caller's.
#
# pip and the Cython build take ~16 s even when nothing changed, so a stamp in .venv records
# a hash of everything the install depends on (pyproject.toml, setup.py, the Cython sources,
# the Python version) and the extras installed with it; when it matches, nothing runs.
# TOPICS_REINSTALL=1 forces the install.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
extras="${1-}"
if [[ ! "$extras" =~ ^[a-z,]*$ ]]; then
    echo "scripts/_venv.sh: extras must look like 'test,bench', got '$extras'" >&2
    return 2 2>/dev/null || exit 2
fi
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
stamp=.venv/.topics-install-stamp
want_hash="$( { .venv/bin/python -VV; cat pyproject.toml setup.py
    cat topics/_core/*.pyx topics/_core/*.pxd topics/_core/*.pxi topics/_core/*.h 2>/dev/null || true
} | sha256sum | cut -d' ' -f1)"
_topics_installed() {
    # The stamp's hash matches and it names every extra asked for; the compiled core is there.
    [ -z "${TOPICS_REINSTALL:-}" ] && [ -f "$stamp" ] || return 1
    [ "$(sed -n 1p "$stamp")" = "$want_hash" ] || return 1
    local have e
    have=",$(sed -n 2p "$stamp"),"
    for e in ${extras//,/ }; do
        [[ "$have" == *",$e,"* ]] || return 1
    done
    compgen -G "topics/_core/_ext*.so" >/dev/null && [ -x .venv/bin/topics-server ]
}
if ! _topics_installed; then
    log=.venv/install.log
    echo "scripts/_venv.sh: installing topics-engine${extras:+[$extras]} into .venv (log: $log)" >&2
    {
        .venv/bin/python -m pip install -q --upgrade pip setuptools wheel
        # The distribution was called `topics` (a name PyPI gives an unrelated project);
        # an old editable install of it would shadow the new one's entry points.
        if compgen -G ".venv/lib/python*/site-packages/topics-*.dist-info" >/dev/null; then
            .venv/bin/python -m pip uninstall -q -y topics
        fi
        target="."
        [ -n "$extras" ] && target=".[${extras}]"
        # Editable, so the compiled core is built in place and tests see the working tree.
        .venv/bin/python -m pip install -q -e "$target"
    } >"$log" 2>&1 || { cat "$log" >&2; echo "scripts/_venv.sh: install failed" >&2; exit 1; }
    # Extras installed before (and still installed) stay in the stamp's list.
    old=""
    [ -f "$stamp" ] && [ "$(sed -n 1p "$stamp")" = "$want_hash" ] && old="$(sed -n 2p "$stamp")"
    printf '%s\n%s\n' "$want_hash" "$(echo "$old,$extras" | tr , '\n' | sed '/^$/d' | sort -u | paste -sd,)" >"$stamp"
fi
unset -f _topics_installed
