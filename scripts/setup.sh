# Sourced by the other scripts: makes sure a fresh Debian 12 machine can build Coffer.
# Idempotent: installs only what is missing.

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/coffer-target}"

ensure_build_tools() {
    if ! command -v cargo >/dev/null 2>&1; then
        for dir in "$HOME/.cargo/bin" /usr/local/cargo/bin; do
            [ -x "$dir/cargo" ] && export PATH="$dir:$PATH"
        done
    fi
    if ! command -v cargo >/dev/null 2>&1; then
        echo "coffer: cargo (Rust 1.95 or later) is needed and was not found" >&2
        exit 1
    fi
    # aws-lc-sys compiles AWS-LC's C sources with the system C compiler.
    if ! command -v cc >/dev/null 2>&1 || ! command -v make >/dev/null 2>&1; then
        echo "coffer: installing a C toolchain (build-essential)" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq build-essential >/dev/null
    fi
}

# What the tests need beyond the build: tcpdump, to capture loopback traffic and check that
# secure links carry no plaintext; fio (built with libnbd), nbdinfo and nbdcopy (libnbd-bin)
# and qemu-img and qemu-io (qemu-utils), the independent NBD clients the block tests use.
ensure_test_tools() {
    local missing=()
    command -v tcpdump >/dev/null 2>&1 || missing+=(tcpdump)
    command -v fio >/dev/null 2>&1 || missing+=(fio)
    command -v nbdinfo >/dev/null 2>&1 || missing+=(libnbd-bin)
    command -v qemu-img >/dev/null 2>&1 || missing+=(qemu-utils)
    if [ ${#missing[@]} -gt 0 ]; then
        echo "coffer: installing ${missing[*]} for the tests" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
}
