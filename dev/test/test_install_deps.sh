#!/usr/bin/env bash
# test_install_deps.sh: data/install_deps.sh's choices, without touching the system: the script runs
# with a PATH of stubs only (it uses nothing but shell builtins and apt-get), where each stub command
# is present or not as a case needs, and a stub apt-get logs its arguments and "installs" a package
# by creating its stub commands (zlib1g-dev: a stub zlib.h where DEPS_ZLIB_H points). Checks: nothing missing -> silent, no apt-get; missing as root ->
# one apt-get update and one install of exactly the missing packages, one line saying so;
# DEPS_NO_INSTALL=1, or no apt-get -> exit 1 with the command to run (or what to install), no apt-get;
# a failing install -> exit 1 naming the command; --trainer asks for zlib1g-dev only. The root cases run only as root (as in CI);
# elsewhere the not-root message (with sudo) is checked instead.
# Prints `test_install_deps: N passed, M failed`.
set -euo pipefail
cd "$(dirname "$0")/../.."
script=$PWD/data/install_deps.sh
passed=0; failed=0
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_install_deps.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

expect() {  # expect "what" CONDITION...: one check
    local what=$1; shift
    if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL $what"; fi
}
has() { printf '%s' "$1" | grep -qF -- "$2"; }
hasnt() { ! has "$@"; }

# stub_cmd DIR NAME: an executable that does nothing
stub_cmd() { printf '#!/bin/sh\nexit 0\n' > "$1/$2"; chmod +x "$1/$2"; }
# setup PRESENT... : a fresh stub dir with the given commands ("zlib": the stub header); "apt-get" and "apt-get-failing" give
# an apt-get that logs to $tmp/apt.log (the failing one exits 100 on install)
setup() {
    rm -rf "${tmp:?}/bin" "$tmp/include" "$tmp/apt.log"; mkdir -p "$tmp/bin"; : > "$tmp/apt.log"
    local c
    for c in "$@"; do
        case "$c" in
            zlib) mkdir -p "$tmp/include"; : > "$tmp/include/zlib.h" ;;
            apt-get|apt-get-failing)
                cat > "$tmp/bin/apt-get" <<STUB
#!/bin/bash
echo "\$*" >> "$tmp/apt.log"
[ "\$1" = install ] || exit 0
[ "$c" = apt-get ] || exit 100
for p in "\$@"; do
    case "\$p" in
        libpcre2-dev) cmds="pcre2-config" ;;
        npm) cmds="npm node" ;;
        nodejs) cmds="node" ;;
        zlib1g-dev) /bin/mkdir -p "$tmp/include"; : > "$tmp/include/zlib.h"; continue ;;
        *) continue ;;
    esac
    for x in \$cmds; do printf '#!/bin/sh\nexit 0\n' > "$tmp/bin/\$x"; /bin/chmod +x "$tmp/bin/\$x"; done
done
STUB
                chmod +x "$tmp/bin/apt-get" ;;
            *) stub_cmd "$tmp/bin" "$c" ;;
        esac
    done
}
# run [VAR=VALUE...] [-- SCRIPT ARGS]: the script with PATH=$tmp/bin and DEPS_ZLIB_H in $tmp (plus
# the given variables); sets out (stdout and stderr) and rc
run() {
    rc=0
    local args=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do args+=("$1"); shift; done
    [ "${1:-}" = -- ] && shift
    out=$(env -u DEPS_NO_INSTALL "${args[@]}" DEPS_ZLIB_H="$tmp/include/zlib.h" PATH="$tmp/bin" "$BASH" "$script" "$@" 2>&1) || rc=$?
}
apt_log() { cat "$tmp/apt.log"; }

setup pcre2-config npm node zlib apt-get
run
expect "all present: exit 0 (rc $rc, output: $out)" [ "$rc" = 0 ]
expect "all present: silent (output: $out)" [ -z "$out" ]
expect "all present: no apt-get (log: $(apt_log))" [ -z "$(apt_log)" ]

setup apt-get
run DEPS_NO_INSTALL=1
expect "DEPS_NO_INSTALL=1: exit 1 (rc $rc)" [ "$rc" = 1 ]
expect "DEPS_NO_INSTALL=1: prints the install command (output: $out)" has "$out" "apt-get install -y libpcre2-dev npm zlib1g-dev"
expect "DEPS_NO_INSTALL=1: names what is missing (output: $out)" has "$out" "pcre2-config, npm, zlib.h not found"
expect "DEPS_NO_INSTALL=1: no apt-get (log: $(apt_log))" [ -z "$(apt_log)" ]

setup
run
expect "no apt-get: exit 1 (rc $rc)" [ "$rc" = 1 ]
expect "no apt-get: says to use the system's package manager (output: $out)" has "$out" "no apt-get: install PCRE2"

if [ "$EUID" = 0 ]; then
    setup apt-get
    run
    expect "root, all missing: exit 0 (rc $rc, output: $out)" [ "$rc" = 0 ]
    expect "root, all missing: one line saying so (output: $out)" \
        [ "$out" = "data/install_deps.sh: installing libpcre2-dev npm zlib1g-dev with apt-get (missing: pcre2-config, npm, zlib.h)" ]
    expect "root, all missing: apt-get update, then install (log: $(apt_log))" \
        [ "$(apt_log)" = "$(printf 'update -qq\ninstall -y -qq libpcre2-dev npm zlib1g-dev')" ]

    setup pcre2-config npm node apt-get
    run
    expect "root, zlib missing: installs zlib1g-dev only (log: $(apt_log))" \
        [ "$(apt_log)" = "$(printf 'update -qq\ninstall -y -qq zlib1g-dev')" ]

    setup apt-get
    run -- --trainer
    expect "root, --trainer: installs zlib1g-dev only (log: $(apt_log))" \
        [ "$(apt_log)" = "$(printf 'update -qq\ninstall -y -qq zlib1g-dev')" ]

    setup pcre2-config zlib apt-get
    run
    expect "root, npm missing: installs npm only (log: $(apt_log))" has "$(apt_log)" "install -y -qq npm"
    expect "root, npm missing: not libpcre2-dev (log: $(apt_log))" hasnt "$(apt_log)" "libpcre2-dev"

    setup pcre2-config npm zlib apt-get
    run
    expect "root, node missing beside npm: installs nodejs (log: $(apt_log))" has "$(apt_log)" "install -y -qq nodejs"

    setup npm node zlib apt-get-failing
    run
    expect "root, install fails: exit 1 (rc $rc)" [ "$rc" = 1 ]
    expect "root, install fails: names the command (output: $out)" has "$out" "\`apt-get install -y libpcre2-dev\` failed"
else
    echo "(not root: the install cases are left out; checking the not-root message instead)"
    setup apt-get
    run
    expect "not root: exit 1 (rc $rc)" [ "$rc" = 1 ]
    expect "not root: prints the sudo command (output: $out)" has "$out" "sudo apt-get install -y libpcre2-dev npm zlib1g-dev"
    expect "not root: no apt-get (log: $(apt_log))" [ -z "$(apt_log)" ]
fi

echo "test_install_deps: $passed passed, $failed failed"
[ "$failed" = 0 ]
