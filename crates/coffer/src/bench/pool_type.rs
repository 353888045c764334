//! The kind of pool a bench measures (`--pool-types`): the cluster's replicated default
//! pool, or an erasure-coded pool made for the run.

use std::time::{Duration, Instant};

/// The kind of pool a cell measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolType {
    Replicated,
    Erasure(ec::Profile),
}

/// `replicated` or `ec:K+M`, as `--pool-types` takes them.
pub fn parse_pool_type(text: &str) -> Result<PoolType, String> {
    if text == "replicated" {
        return Ok(PoolType::Replicated);
    }
    let code = text
        .strip_prefix("ec:")
        .ok_or_else(|| format!("{text:?}: a pool type is replicated or ec:K+M (ec:4+2)"))?;
    ec::Profile::parse(code, u64::from(ec::UNIT_BYTES_DEFAULT))
        .map(PoolType::Erasure)
        .map_err(|e| format!("{text:?}: {e}"))
}

impl PoolType {
    pub fn label(&self) -> String {
        match self {
            PoolType::Replicated => "replicated".into(),
            PoolType::Erasure(profile) => format!("ec:{profile}"),
        }
    }

    /// The label as names of pools and files take it: `replicated`, `ec-4-2`.
    pub fn slug(&self) -> String {
        self.label().replace([':', '+'], "-")
    }

    /// Refuses an erasure-coded type on a cluster of fewer OSDs than it has shards.
    pub fn check_osds(&self, osds: u32) -> Result<(), String> {
        match self {
            PoolType::Erasure(profile) if (osds as usize) < profile.shards() => Err(format!(
                "--pool-types ec:{profile} needs {} OSDs, one per shard: add --osds {}",
                profile.shards(),
                profile.shards()
            )),
            _ => Ok(()),
        }
    }

    /// The shape of an erasure-coded pool made for the run (as `pool create --ec`'s).
    fn shape(profile: ec::Profile) -> Result<crate::admin::PoolShape, String> {
        crate::admin::PoolShape::new(None, None, Some(&profile.to_string()), None)
    }

    /// The pool as the bench's header shows it, on a cluster of `osds` OSDs.
    pub fn describe(&self, osds: u32) -> Result<String, String> {
        Ok(match self {
            PoolType::Replicated => format!("replicated, size {}", osds.clamp(1, 3)),
            PoolType::Erasure(profile) => {
                let shape = PoolType::shape(*profile)?;
                format!(
                    "{}, min_size {}, {} PGs",
                    shape.describe(),
                    shape.min_size,
                    crate::admin::DEFAULT_PG_NUM
                )
            }
        })
    }

    /// The pool this type is measured in, made (and waited clean) if it is erasure-coded:
    /// sealed at the edge with `edge` (as the configuration's default pool is), else by
    /// the OSDs.
    pub async fn pool(&self, admin: &client::Cluster, edge: bool) -> Result<String, String> {
        let PoolType::Erasure(profile) = self else {
            return Ok(crate::up::DEFAULT_POOL.into());
        };
        let name = format!("bench-{}", self.slug());
        let shape = PoolType::shape(*profile)?;
        let domain = map::placement::FailureDomain::Osd;
        let change = shape.change(&name, crate::admin::DEFAULT_PG_NUM, domain);
        let command = if edge {
            messenger::message::Command::PoolCreateEdge { change }
        } else {
            messenger::message::Command::Change(change)
        };
        admin
            .command(command)
            .await
            .map_err(|e| format!("creating pool {name}: {e}"))?;
        super::fresh::wait_clean(admin).await?;
        Ok(name)
    }
}

/// Pool `pool`'s usage once the OSDs' reports count at least `objects` objects in it
/// (they report every few seconds), or after 30 s as it is then.
pub async fn settled_usage(
    admin: &client::Cluster,
    pool: &str,
    objects: u64,
) -> Result<messenger::message::PoolStats, String> {
    let id = admin.pool(pool).await.map_err(|e| e.to_string())?.id();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = admin.status().await.map_err(|e| e.to_string())?;
        let usage = status
            .pool_usage
            .iter()
            .find(|(p, _)| *p == id)
            .map(|(_, u)| *u)
            .unwrap_or_default();
        if usage.objects >= objects || Instant::now() > deadline {
            return Ok(usage);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
