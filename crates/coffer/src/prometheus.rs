//! What `coffer up` gives Prometheus: a metrics address on loopback for each daemon it runs
//! (kept in the configuration's `[metrics]` section, so a resumed cluster keeps them), and a
//! Prometheus configuration that scrapes them all (docs/metrics.md).

use std::path::{Path, PathBuf};

use client::conf::Conf;

/// Where `coffer up` writes the Prometheus configuration and its list of targets.
pub const DIR: &str = "prometheus";
/// The Prometheus configuration, to run as `prometheus --config.file=DIR/prometheus.yml`.
pub const CONFIG_FILE: &str = "prometheus.yml";
/// The targets, one per daemon labelled with its name, which Prometheus re-reads when they
/// change (file-based service discovery).
const TARGETS_FILE: &str = "targets.json";
/// How often the configuration asks Prometheus to scrape.
const SCRAPE_INTERVAL: &str = "5s";

/// Gives each daemon of `names` without one a metrics address on loopback, and saves the
/// configuration at `path` if any was given.
pub fn assign(conf: &mut Conf, path: &Path, names: &[String]) -> Result<(), String> {
    let mut added = false;
    for name in names {
        if !conf.metrics.contains_key(name) {
            let port = unnamed_port(conf, crate::up::free_loopback_port)?;
            conf.metrics
                .insert(name.clone(), format!("127.0.0.1:{port}"));
            added = true;
        }
    }
    if added {
        conf.save(path).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// A port from `free` that no address of `conf` names. A front end's port given to
/// `coffer up` (`--gw`, `--nbd`) is free until its daemon starts, after the metrics'
/// listeners may have; a metrics port equal to it would leave the front end unable to
/// listen. `free` never gives the same port twice, so the named ports bound the tries.
fn unnamed_port(conf: &Conf, mut free: impl FnMut() -> Result<u16, String>) -> Result<u16, String> {
    let named = conf.named_ports();
    for _ in 0..=named.len() {
        let port = free()?;
        if !named.contains(&port) {
            return Ok(port);
        }
    }
    Err(format!(
        "choosing a metrics port: every port offered is named in {}",
        conf.dir.display()
    ))
}

/// The targets file's text: every daemon's address, labelled `daemon` with its name.
fn targets(conf: &Conf) -> String {
    let entries: Vec<serde_json::Value> = conf
        .metrics
        .iter()
        .map(|(name, addr)| {
            serde_json::json!({
                "targets": [addr],
                "labels": { "daemon": name, "cluster": conf.fsid },
            })
        })
        .collect();
    serde_json::to_string_pretty(&entries).unwrap_or_else(|_| "[]".into())
}

/// The Prometheus configuration: one job, `coffer`, over the targets file beside it.
fn config(targets: &Path) -> String {
    format!(
        "# Written by coffer up: scrapes every daemon of this cluster (docs/metrics.md).\n\
         # Run: prometheus --config.file={dir}/{CONFIG_FILE}\n\
         global:\n  scrape_interval: {SCRAPE_INTERVAL}\n\
         scrape_configs:\n  - job_name: coffer\n    file_sd_configs:\n      - files:\n          - {targets}\n",
        dir = targets.parent().map_or(String::new(), |d| d.display().to_string()),
        targets = targets.display(),
    )
}

/// Writes the configuration and the targets in `DIR` under the cluster's directory; returns
/// the configuration's path.
pub fn write(conf: &Conf) -> Result<PathBuf, String> {
    let dir = conf.dir.join(DIR);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let targets_path = dir.join(TARGETS_FILE);
    let write = |path: &Path, text: String| {
        std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
    };
    write(&targets_path, targets(conf))?;
    let config_path = dir.join(CONFIG_FILE);
    write(&config_path, config(&targets_path))?;
    Ok(config_path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_daemon_is_a_target_named_by_its_label() {
        let dir = tempfile::tempdir().expect("a directory");
        let path = dir.path().join("coffer.toml");
        let text = "fsid = \"f00d\"\n[[mon]]\nname = \"mon.a\"\naddr = \"127.0.0.1:6789\"\n";
        std::fs::write(&path, text).expect("written");
        let mut conf = Conf::load(&path).expect("a configuration");
        conf.metrics.insert("mon.a".into(), "127.0.0.1:9001".into());
        conf.metrics.insert("osd.0".into(), "127.0.0.1:9002".into());
        let parsed: serde_json::Value =
            serde_json::from_str(&targets(&conf)).expect("targets are JSON");
        assert_eq!(parsed[1]["targets"][0], "127.0.0.1:9002");
        assert_eq!(parsed[1]["labels"]["daemon"], "osd.0");
        assert_eq!(parsed[1]["labels"]["cluster"], "f00d");
        let text = config(Path::new("/d/prometheus/targets.json"));
        assert!(text.contains("--config.file=/d/prometheus/prometheus.yml"));
        assert!(text.contains("          - /d/prometheus/targets.json\n"));
    }

    #[test]
    fn a_metrics_port_is_never_one_the_configuration_names() {
        let dir = tempfile::tempdir().expect("a directory");
        let path = dir.path().join("coffer.toml");
        let text = "fsid = \"f00d\"\n[[mon]]\nname = \"mon.a\"\naddr = \"127.0.0.1:6789\"\n\
                    [nbd]\nimage = \"rbd/disk\"\nlisten = \"127.0.0.1:23033\"\n\
                    [gw]\nlisten = \"127.0.0.1:23034\"\n";
        std::fs::write(&path, text).expect("written");
        let mut conf = Conf::load(&path).expect("a configuration");
        conf.metrics.insert("mon.a".into(), "127.0.0.1:9001".into());
        let mut offered = [6789, 23033, 23034, 9001, 24000].into_iter();
        let port = unnamed_port(&conf, || Ok(offered.next().expect("a port left")));
        assert_eq!(port, Ok(24000));
        let mut same = std::iter::repeat(23034);
        let refused = unnamed_port(&conf, || Ok(same.next().expect("a port")));
        assert!(refused.is_err(), "{refused:?}");
    }
}
