//! Writes each fuzz target's seed corpus into DIR/<target>/ (scripts/fuzz runs it).

use std::path::PathBuf;

fn main() -> std::io::Result<()> {
    let dir: PathBuf = std::env::args_os().nth(1).expect("usage: seeds DIR").into();
    for (target, seeds) in coffer_fuzz::seeds() {
        let corpus = dir.join(target);
        std::fs::create_dir_all(&corpus)?;
        for (i, seed) in seeds.iter().enumerate() {
            std::fs::write(corpus.join(format!("seed-{i}")), seed)?;
        }
    }
    Ok(())
}
