//! The simulated network: every OSD-to-OSD and client-to-OSD request goes through
//! [`Net::call`], which delays it, may lose it or its reply, and gets no answer across a
//! partition, all drawn from the run's seeded generator.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use map::auth::Caps;
use map::placement::OsdId;
use messenger::message::{OsdReply, OsdRequest};
use messenger::{EntityName, SegmentCheck};
use osd::{Call, Caller, Node, PeerNet, PEER_TIMEOUT};
use rand::rngs::StdRng;
use rand::Rng;
use tokio::sync::oneshot;

use crate::lock;

/// Longest one-way delay of a message.
const DELAY_MS_MAX: u64 = 20;
/// Delay of a slow message (a congested or flapping link), at most: long, but within
/// [`PEER_TIMEOUT`], so it is answered late rather than given up on.
const SLOW_MS_MAX: u64 = 20_000;
/// How long a refused connection (the OSD is not running) takes to fail.
const REFUSED_AFTER: Duration = Duration::from_millis(1);

/// The seeded generator every random choice of a run is drawn from, in the order the
/// single thread asks.
#[derive(Clone)]
pub struct Dice(Arc<Mutex<StdRng>>);

impl Dice {
    pub fn new(rng: StdRng) -> Dice {
        Dice(Arc::new(Mutex::new(rng)))
    }

    pub fn with<T>(&self, draw: impl FnOnce(&mut StdRng) -> T) -> T {
        draw(&mut lock(&self.0))
    }

    pub fn below(&self, n: u64) -> u64 {
        self.with(|rng| rng.random_range(0..n.max(1)))
    }

    pub fn chance(&self, p: f64) -> bool {
        self.with(|rng| rng.random_bool(p))
    }
}

/// A scripted delay: the next request from `from` to `to` that `matches` takes `delay` more.
struct Hold {
    from: OsdId,
    to: OsdId,
    matches: fn(&OsdRequest) -> bool,
    delay: Duration,
}

#[derive(Default)]
struct Links {
    /// The running OSDs.
    nodes: BTreeMap<OsdId, Node>,
    /// OSDs cut off from everyone else (clients and monitors included).
    isolated: BTreeSet<OsdId>,
    holds: Vec<Hold>,
}

pub struct Net {
    dice: Dice,
    /// Chances that a message (request or reply) is lost, and that it is slow.
    loss: Mutex<f64>,
    slow: Mutex<f64>,
    links: Mutex<Links>,
    /// A hash of every call's endpoints, time and outcome, in order: two runs of a seed
    /// that took the same course have the same trace.
    trace: Mutex<u64>,
    started: tokio::time::Instant,
}

impl Net {
    pub fn new(dice: Dice, loss: f64, slow: f64) -> Arc<Net> {
        Arc::new(Net {
            dice,
            loss: Mutex::new(loss),
            slow: Mutex::new(slow),
            links: Mutex::default(),
            trace: Mutex::default(),
            started: tokio::time::Instant::now(),
        })
    }

    fn links(&self) -> std::sync::MutexGuard<'_, Links> {
        lock(&self.links)
    }

    /// Loses and slows no more messages from now on.
    pub fn calm(&self) {
        *lock(&self.loss) = 0.0;
        *lock(&self.slow) = 0.0;
    }

    fn happens(&self, chance: &Mutex<f64>) -> bool {
        let chance = *lock(chance);
        chance > 0.0 && self.dice.chance(chance)
    }

    fn lost(&self) -> bool {
        self.happens(&self.loss)
    }

    pub fn attach(&self, node: Node) {
        self.links().nodes.insert(node.id(), node);
    }

    /// Takes `osd` off the network (it crashed); its node, to stop.
    pub fn detach(&self, osd: OsdId) -> Option<Node> {
        self.links().nodes.remove(&osd)
    }

    pub fn node(&self, osd: OsdId) -> Option<Node> {
        self.links().nodes.get(&osd).cloned()
    }

    pub fn set_isolated(&self, osd: OsdId, isolated: bool) {
        let mut links = self.links();
        if isolated {
            links.isolated.insert(osd);
        } else {
            links.isolated.remove(&osd);
        }
    }

    pub fn is_isolated(&self, osd: OsdId) -> bool {
        self.links().isolated.contains(&osd)
    }

    /// Delays the next request from `from` to `to` that `matches` by `delay` (on top of
    /// the usual), as a scenario's script asks.
    pub fn hold_next(
        &self,
        from: OsdId,
        to: OsdId,
        matches: fn(&OsdRequest) -> bool,
        delay: Duration,
    ) {
        self.links().holds.push(Hold {
            from,
            to,
            matches,
            delay,
        });
    }

    /// Scripted delays not yet applied.
    pub fn holds_pending(&self) -> usize {
        self.links().holds.len()
    }

    /// The scripted delay of this request, if one matches it (it is then used up).
    fn held(&self, from: Option<OsdId>, to: OsdId, request: &OsdRequest) -> Duration {
        let mut links = self.links();
        let matching = links
            .holds
            .iter()
            .position(|h| Some(h.from) == from && h.to == to && (h.matches)(request));
        matching.map_or(Duration::ZERO, |i| links.holds.remove(i).delay)
    }

    /// Whether a message from `from` (`None`: a client) reaches `to` now.
    fn reaches(&self, from: Option<OsdId>, to: OsdId) -> bool {
        let links = self.links();
        !links.isolated.contains(&to) && from.is_none_or(|f| !links.isolated.contains(&f))
    }

    fn delay(&self) -> Duration {
        let most = if self.happens(&self.slow) {
            SLOW_MS_MAX
        } else {
            DELAY_MS_MAX
        };
        Duration::from_millis(self.dice.below(most + 1))
    }

    pub fn trace(&self) -> u64 {
        *lock(&self.trace)
    }

    /// Sends `request` from `from` (`None`: a client) to `to` and waits for its reply, as
    /// the messenger would: a stopped OSD refuses at once; a cut link, a lost message or a
    /// crash during the request give no answer within [`PEER_TIMEOUT`].
    pub async fn call(
        self: &Arc<Self>,
        from: Option<OsdId>,
        to: OsdId,
        request: OsdRequest,
        data: Bytes,
    ) -> Result<(OsdReply, Bytes), String> {
        let outcome = self.exchange(from, to, request, data).await;
        let mut trace = lock(&self.trace);
        let mut hasher = std::hash::DefaultHasher::new();
        (*trace, from, to, self.started.elapsed()).hash(&mut hasher);
        outcome
            .as_ref()
            .map(|(reply, _)| std::mem::discriminant(reply))
            .ok()
            .hash(&mut hasher);
        *trace = hasher.finish();
        drop(trace);
        outcome
    }

    async fn exchange(
        self: &Arc<Self>,
        from: Option<OsdId>,
        to: OsdId,
        request: OsdRequest,
        data: Bytes,
    ) -> Result<(OsdReply, Bytes), String> {
        if self.node(to).is_none() {
            tokio::time::sleep(REFUSED_AFTER).await;
            return Err(format!("osd.{} refused the connection", to.0));
        }
        let timeout = tokio::time::sleep(PEER_TIMEOUT);
        let no_answer = || format!("osd.{} did not answer within {PEER_TIMEOUT:?}", to.0);
        tokio::pin!(timeout);
        let held = self.held(from, to, &request);
        tokio::time::sleep(self.delay() + held).await;
        if !self.reaches(from, to) || self.lost() {
            timeout.await;
            return Err(no_answer());
        }
        // Only the serving task holds the node, so a crash can close its store while
        // callers still wait; one that crashed while the request travelled never answers.
        let Some(server) = self.node(to) else {
            timeout.await;
            return Err(no_answer());
        };
        let (answer, answered) = oneshot::channel();
        let caller = caller(from);
        server.clone().spawn(async move {
            let reply = server.serve(&caller, request, data).await;
            let _ = answer.send(reply);
        });
        tokio::select! {
            biased;
            reply = answered => {
                let Ok(reply) = reply else {
                    // The OSD stopped while it served: the link closes.
                    return Err(format!("osd.{}: the link closed", to.0));
                };
                tokio::time::sleep(self.delay()).await;
                if !self.reaches(from, to) || self.lost() {
                    timeout.await;
                    return Err(no_answer());
                }
                Ok(reply)
            }
            () = &mut timeout => Err(no_answer()),
        }
    }
}

/// Who a request comes from: an OSD, or the simulation's client, which may do anything.
fn caller(from: Option<OsdId>) -> Caller {
    let caps = Caps::parse("mon=rw osd=rw").map_err(|e| e.to_string());
    match from {
        Some(osd) => Caller::new(EntityName::osd(osd.0), caps),
        None => Caller::new(client_entity(), caps),
    }
}

fn client_entity() -> EntityName {
    "client.sim"
        .parse()
        .unwrap_or_else(|e| panic!("client.sim is a valid entity name: {e:?}"))
}

/// One OSD's view of the network: its calls go out as its own.
pub struct Link {
    pub from: OsdId,
    pub net: Arc<Net>,
}

impl PeerNet for Link {
    fn call<'a>(
        &'a self,
        osd: OsdId,
        request: &'a OsdRequest,
        data: Bytes,
        _check: Option<SegmentCheck>,
    ) -> Call<'a> {
        Box::pin(self.net.call(Some(self.from), osd, request.clone(), data))
    }
}
