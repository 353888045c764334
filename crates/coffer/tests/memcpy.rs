//! Every Coffer process on an AMD CPU copies without glibc's `rep movsb` (crates/coffer/src/
//! memcpy.rs), elsewhere as glibc chooses, and a threshold the operator set is kept: seen in
//! the machine line `coffer bench memcpy` prints and writes, beside every cell it promises.
//! No timing is asserted.

use std::process::Command;

/// The memcpy a bench run with `tunables` (None: unset) says it ran with, in its header line
/// and its JSON.
fn memcpy_of_a_bench(tunables: Option<&str>) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("memcpy.json");
    let mut command = Command::new(env!("CARGO_BIN_EXE_coffer"));
    command
        .args(["bench", "memcpy", "--mib", "1", "--rounds", "1"])
        .args(["--size-kib", "4,16", "--json"])
        .arg(&json);
    match tunables {
        Some(value) => command.env("GLIBC_TUNABLES", value),
        None => command.env_remove("GLIBC_TUNABLES"),
    };
    let output = command.output().expect("run coffer bench memcpy");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "bench failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json written")).expect("json");
    let cells = doc["cells"].as_array().expect("cells");
    assert_eq!(cells.len(), 2 * 64, "a cell per size and offset: {doc}");
    for cell in cells {
        let rate = cell["s_per_gib"].as_f64().unwrap_or(0.0);
        assert!(rate.is_finite() && rate > 0.0, "{cell}");
    }
    let memcpy = doc["machine"]["memcpy"]
        .as_str()
        .expect("the machine's memcpy in the JSON")
        .to_owned();
    assert!(
        stdout.contains(&format!("; memcpy {memcpy};")),
        "the header line says the same: {stdout}"
    );
    memcpy
}

#[test]
fn amd_copies_without_rep_movsb_unless_the_operator_chose() {
    let amd = std::fs::read_to_string("/proc/cpuinfo")
        .expect("read /proc/cpuinfo")
        .contains("AuthenticAMD");
    let expected = match amd {
        true => "without rep movsb",
        false => "as glibc chooses",
    };
    assert_eq!(memcpy_of_a_bench(None), expected);
    assert_eq!(
        memcpy_of_a_bench(Some("glibc.malloc.check=0")),
        expected,
        "other tunables stay beside it"
    );
    assert_eq!(
        memcpy_of_a_bench(Some("glibc.cpu.x86_rep_movsb_threshold=8192")),
        "as glibc chooses",
        "the operator's threshold is kept"
    );
}
