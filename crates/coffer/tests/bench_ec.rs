//! `coffer bench ec` runs end to end and reports every cell it promises: numbers present,
//! positive and finite, the space each profile stores per byte, and the shard bytes a planned
//! 4 KiB overwrite reads and writes. The bench checks every rebuilt shard, and the parity
//! after every delta and planned overwrite, against the code itself, so a run that succeeds
//! has also checked them. No timing is asserted.

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
            && stdout.contains("rebuild-m")
            && stdout.contains("overwrite-4K"),
        "the header names the command, the table every op:\n{stdout}"
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json written"))
            .expect("valid JSON");
    let cells = doc["cells"].as_array().expect("cells");
    assert_eq!(cells.len(), 2 * 2 * 5, "profiles x units x ops");
    for cell in cells {
        for key in ["gb_s", "us_per_op"] {
            let value = cell[key].as_f64().unwrap_or(f64::NAN);
            assert!(value.is_finite() && value > 0.0, "{key} in {cell}");
        }
        // A 4 KiB overwrite inside an object reads 12 KiB at 4+2 (a rewrite: the other
        // three units) and 16 KiB at 8+3 (a delta: its unit and three parity pieces), and
        // writes its unit and the m parity pieces (erasure.md, §6).
        if cell["op"] == "overwrite-4K" {
            let (read, written) = match cell["profile"].as_str() {
                Some("4+2") => (12.0, 12.0),
                _ => (16.0, 16.0),
            };
            assert_eq!(cell["read_per_op"].as_f64(), Some(read * 1024.0), "{cell}");
            assert_eq!(
                cell["written_per_op"].as_f64(),
                Some(written * 1024.0),
                "{cell}"
            );
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
