//! `coffer bench ec` runs end to end and reports every cell it promises: numbers present,
//! positive and finite, and the space each profile stores per byte. The bench checks every
//! rebuilt shard and every delta-updated parity against the code itself, so a run that
//! succeeds has also checked them. No timing is asserted.

mod common;

use std::process::Command;

use common::run_ok;

#[test]
fn bench_ec_reports_every_cell_and_checks_what_it_rebuilt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("cells.json");
    let stdout = run_ok(
        "coffer bench ec",
        Command::new(env!("CARGO_BIN_EXE_coffer"))
            .args(["bench", "ec", "--profiles", "4+2,8+3", "--unit-kib", "4,64"])
            .args([
                "--mib",
                "8",
                "--working-set-mib",
                "8",
                "--rounds",
                "1",
                "--json",
            ])
            .arg(&json),
    );
    assert!(
        stdout.contains("command: ")
            && stdout.contains(" bench ec ")
            && stdout.contains("rebuild-m"),
        "the header names the command, the table every op:\n{stdout}"
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json written"))
            .expect("valid JSON");
    let cells = doc["cells"].as_array().expect("cells");
    assert_eq!(cells.len(), 2 * 2 * 4, "profiles x units x ops");
    for cell in cells {
        for key in ["gb_s", "us_per_op"] {
            let value = cell[key].as_f64().unwrap_or(f64::NAN);
            assert!(value.is_finite() && value > 0.0, "{key} in {cell}");
        }
        let stored = cell["stored_per_byte"].as_f64().expect("stored_per_byte");
        let expected = if cell["profile"] == "4+2" {
            1.5
        } else {
            11.0 / 8.0
        };
        assert!((stored - expected).abs() < 1e-9, "{cell}");
    }

    let refused = Command::new(env!("CARGO_BIN_EXE_coffer"))
        .args(["bench", "ec", "--profiles", "4-2"])
        .output()
        .expect("run coffer bench ec");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("write K+M"),
        "{stderr}"
    );
}
