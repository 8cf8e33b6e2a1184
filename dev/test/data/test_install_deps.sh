#!/usr/bin/env bash
# test_install_deps.sh: data/install_deps.sh's choices, without touching the system: the script runs
# with a PATH of stubs only (it uses nothing but shell builtins and apt-get), where each stub command
# is present or not as a case needs, and a stub apt-get logs its arguments and "installs" a package
# by creating its stub commands (libcjson-dev and zlib1g-dev: stub headers, which CJSON_HEADER and
# DEPS_ZLIB_H point the script at). Checks: nothing missing -> silent, no apt-get; missing as root -> one
# apt-get update and one install of exactly the missing packages, one line saying so; --trainer ->
# libcjson-dev and zlib1g-dev only;
# DEPS_NO_INSTALL=1, or no apt-get -> exit 1 with the command to run (or what to install), no apt-get;
# a failing install -> exit 1 naming the command; --fuzz -> clang and libclang-rt-dev only (the libFuzzer
# runtime: a stub file that DEPS_FUZZER_RT's pattern matches). The root cases run only as root (as in CI);
# elsewhere the not-root message (with sudo) is checked instead.
# Prints `test_install_deps: N passed, M failed`.
set -euo pipefail
cd "$(dirname "$0")/../../.."
script=$PWD/data/install_deps.sh
source dev/test/testing.sh
test_begin test_install_deps

# stub_cmd DIR NAME: an executable that does nothing
stub_cmd() { printf '#!/bin/sh\nexit 0\n' > "$1/$2"; chmod +x "$1/$2"; }
# setup PRESENT... : a fresh stub dir with the given commands ("cjson", "zlib": the headers, "libfuzzer": the
# libFuzzer runtime); "apt-get" and
# "apt-get-failing" give an apt-get that logs to $tmp/apt.log (the failing one exits 100 on install)
header=$tmp/include/cjson/cJSON.h
zlib_header=$tmp/include/zlib.h
fuzzer_rt=$tmp/include/libclang_rt.fuzzer-x86_64.a
setup() {
    rm -rf "${tmp:?}/bin" "$tmp/include" "$tmp/apt.log"; mkdir -p "$tmp/bin" "$tmp/include/cjson"; : > "$tmp/apt.log"
    local c
    for c in "$@"; do
        case "$c" in
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
        libcjson-dev) : > "$header"; continue ;;
        zlib1g-dev) : > "$zlib_header"; continue ;;
        clang) cmds="clang" ;;
        libclang-rt-dev) : > "$fuzzer_rt"; continue ;;
        *) continue ;;
    esac
    for x in \$cmds; do printf '#!/bin/sh\nexit 0\n' > "$tmp/bin/\$x"; /bin/chmod +x "$tmp/bin/\$x"; done
done
STUB
                chmod +x "$tmp/bin/apt-get" ;;
            cjson) : > "$header" ;;
            zlib) : > "$zlib_header" ;;
            libfuzzer) : > "$fuzzer_rt" ;;
            *) stub_cmd "$tmp/bin" "$c" ;;
        esac
    done
}
# run [VAR=VALUE...] [-- ARG]: the script with PATH=$tmp/bin and the stub headers (plus the given
# variables and the script's argument); sets out (stdout and stderr) and rc
run() {
    rc=0
    local vars=() arg=()
    while [ $# -gt 0 ]; do
        if [ "$1" = -- ]; then arg=("$2"); break; fi
        vars+=("$1"); shift
    done
    out=$(env -u DEPS_NO_INSTALL "${vars[@]}" PATH="$tmp/bin" CJSON_HEADER="$header" DEPS_ZLIB_H="$zlib_header" \
        DEPS_FUZZER_RT="$tmp/include/libclang_rt.fuzzer-*.a" "$BASH" "$script" "${arg[@]}" 2>&1) || rc=$?
}
apt_log() { cat "$tmp/apt.log"; }

setup pcre2-config cjson zlib npm node apt-get
run
expect "all present: exit 0 (rc $rc, output: $out)" [ "$rc" = 0 ]
expect "all present: silent (output: $out)" [ -z "$out" ]
expect "all present: no apt-get (log: $(apt_log))" [ -z "$(apt_log)" ]

setup apt-get
run DEPS_NO_INSTALL=1
expect "DEPS_NO_INSTALL=1: exit 1 (rc $rc)" [ "$rc" = 1 ]
expect "DEPS_NO_INSTALL=1: prints the install command (output: $out)" has "$out" "apt-get install -y libpcre2-dev libcjson-dev zlib1g-dev npm"
expect "DEPS_NO_INSTALL=1: names what is missing (output: $out)" has "$out" "pcre2-config, cjson/cJSON.h, zlib.h, npm not found"
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
        [ "$out" = "data/install_deps.sh: installing libpcre2-dev libcjson-dev zlib1g-dev npm with apt-get (missing: pcre2-config, cjson/cJSON.h, zlib.h, npm)" ]
    expect "root, all missing: apt-get update, then install (log: $(apt_log))" \
        [ "$(apt_log)" = "$(printf 'update -qq\ninstall -y -qq libpcre2-dev libcjson-dev zlib1g-dev npm')" ]

    setup pcre2-config cjson zlib apt-get
    run
    expect "root, npm missing: installs npm only (log: $(apt_log))" has "$(apt_log)" "install -y -qq npm"
    expect "root, npm missing: not libpcre2-dev (log: $(apt_log))" hasnt "$(apt_log)" "libpcre2-dev"

    setup pcre2-config npm node zlib apt-get
    run
    expect "root, cJSON missing: installs libcjson-dev only (log: $(apt_log))" \
        [ "$(apt_log)" = "$(printf 'update -qq\ninstall -y -qq libcjson-dev')" ]

    setup pcre2-config npm node cjson apt-get
    run
    expect "root, zlib missing: installs zlib1g-dev only (log: $(apt_log))" \
        [ "$(apt_log)" = "$(printf 'update -qq\ninstall -y -qq zlib1g-dev')" ]

    setup apt-get
    run -- --trainer
    expect "root, --trainer, all missing: exit 0 (rc $rc, output: $out)" [ "$rc" = 0 ]
    expect "root, --trainer: installs libcjson-dev and zlib1g-dev only (log: $(apt_log))" \
        [ "$(apt_log)" = "$(printf 'update -qq\ninstall -y -qq libcjson-dev zlib1g-dev')" ]

    setup pcre2-config cjson zlib npm apt-get
    run
    expect "root, node missing beside npm: installs nodejs (log: $(apt_log))" has "$(apt_log)" "install -y -qq nodejs"

    setup apt-get
    run -- --fuzz
    expect "root, --fuzz, all missing: exit 0 (rc $rc, output: $out)" [ "$rc" = 0 ]
    expect "root, --fuzz: installs clang and libclang-rt-dev only (log: $(apt_log))" \
        [ "$(apt_log)" = "$(printf 'update -qq\ninstall -y -qq clang libclang-rt-dev')" ]

    setup clang apt-get
    run -- --fuzz
    expect "root, --fuzz, clang without libFuzzer: installs libclang-rt-dev only (log: $(apt_log))" \
        [ "$(apt_log)" = "$(printf 'update -qq\ninstall -y -qq libclang-rt-dev')" ]

    setup npm node cjson zlib apt-get-failing
    run
    expect "root, install fails: exit 1 (rc $rc)" [ "$rc" = 1 ]
    expect "root, install fails: names the command (output: $out)" has "$out" "\`apt-get install -y libpcre2-dev\` failed"
else
    echo "(not root: the install cases are left out; checking the not-root message instead)"
    setup apt-get
    run
    expect "not root: exit 1 (rc $rc)" [ "$rc" = 1 ]
    expect "not root: prints the sudo command (output: $out)" has "$out" "sudo apt-get install -y libpcre2-dev libcjson-dev zlib1g-dev npm"
    expect "not root: no apt-get (log: $(apt_log))" [ -z "$(apt_log)" ]
    setup apt-get
    run -- --trainer
    expect "not root, --trainer: asks for libcjson-dev and zlib1g-dev only (output: $out)" \
        has "$out" "sudo apt-get install -y libcjson-dev zlib1g-dev"$'\n'
fi

setup cjson zlib
run -- --trainer
expect "--trainer, cJSON and zlib present: exit 0, silent (rc $rc, output: $out)" [ "$rc" = 0 -a -z "$out" ]
setup pcre2-config npm node zlib apt-get
run DEPS_NO_INSTALL=1 -- --trainer
expect "--trainer, cJSON missing: exit 1 (rc $rc)" [ "$rc" = 1 ]
expect "--trainer, cJSON missing: the command for libcjson-dev alone (output: $out)" has "$out" "apt-get install -y libcjson-dev"$'\n'
setup pcre2-config npm node cjson apt-get
run DEPS_NO_INSTALL=1 -- --trainer
expect "--trainer, zlib missing: the command for zlib1g-dev alone (output: $out)" has "$out" "apt-get install -y zlib1g-dev"$'\n'
setup clang libfuzzer
run -- --fuzz
expect "--fuzz, clang and libFuzzer present: exit 0, silent (rc $rc, output: $out)" [ "$rc" = 0 -a -z "$out" ]
setup pcre2-config npm node cjson zlib apt-get
run DEPS_NO_INSTALL=1 -- --fuzz
expect "--fuzz, both missing: exit 1 (rc $rc)" [ "$rc" = 1 ]
expect "--fuzz, both missing: the command for clang and libclang-rt-dev alone (output: $out)" \
    has "$out" "apt-get install -y clang libclang-rt-dev"$'\n'
run -- bogus
expect "an unknown argument: exit 2 with the usage (rc $rc, output: $out)" [ "$rc" = 2 ]

test_end
