//! `coffer bench mac` measures every MAC it names at every segment size asked for, says in
//! its JSON which aws-lc capabilities the operator masked, and refuses sizes it cannot cut
//! from its working set. No timing is asserted.

use std::process::Command;

fn bench_mac(args: &[&str], ia32cap: Option<&str>) -> std::process::Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_coffer"));
    command.args(["bench", "mac", "--rounds", "1"]).args(args);
    match ia32cap {
        Some(value) => command.env("OPENSSL_ia32cap", value),
        None => command.env_remove("OPENSSL_ia32cap"),
    };
    command.output().expect("run coffer bench mac")
}

#[test]
fn every_mac_is_measured_at_every_size_and_the_mask_is_recorded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("mac.json");
    let json_arg = json.to_str().expect("utf-8 path");
    for mask in [None, Some("~0x0:~0x10000")] {
        let args = [
            "--segment-kib",
            "4,256",
            "--mib",
            "2",
            "--working-set-mib",
            "4",
        ];
        let output = bench_mac(&[&args[..], &["--json", json_arg]].concat(), mask);
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "bench failed: {}\n{stdout}",
            String::from_utf8_lossy(&output.stderr)
        );
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).expect("json")).expect("json");
        let cells = doc["cells"].as_array().expect("cells");
        let mut seen: Vec<(u64, String)> = cells
            .iter()
            .map(|cell| {
                let rate = cell["gb_s"].as_f64().unwrap_or(0.0);
                assert!(rate.is_finite() && rate > 0.0, "{cell}");
                (
                    cell["segment_bytes"].as_u64().expect("size"),
                    cell["mac"].to_string(),
                )
            })
            .collect();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 2 * 4, "four MACs at two sizes: {doc}");
        assert_eq!(doc["config"]["openssl_ia32cap"].as_str(), mask, "{doc}");
        assert_eq!(
            stdout.lines().filter(|l| l.ends_with('x')).count(),
            2,
            "{stdout}"
        );
    }
}

#[test]
fn a_segment_larger_than_the_working_set_is_refused() {
    let output = bench_mac(&["--segment-kib", "8192", "--working-set-mib", "4"], None);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--segment-kib takes sizes from 1 to the working set (4096)"),
        "{stderr}"
    );
}
