//! The simulated network: every OSD-to-OSD and client-to-OSD request goes through
//! [`Net::call`], which delays it, may lose it or its reply, and gets no answer across a
//! partition, all drawn from the run's seeded generator. A request, once sent, travels on
//! its own: it still arrives if its sender crashes or gives up meanwhile, as a message on
//! the wire does, but never at a later run of the OSD it was sent to.

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
/// Delay of a slow message (a congested or flapping link), at most: past [`PEER_TIMEOUT`],
/// so some arrive after their sender gave up on them.
const SLOW_MS_MAX: u64 = 40_000;
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
    /// The running OSDs, each with the number of its run (no two runs share one).
    nodes: BTreeMap<OsdId, (u64, Node)>,
    runs: u64,
    /// How each held request was answered, in order: for a script to check that its race
    /// happened as it meant.
    held_outcomes: Vec<Result<OsdReply, String>>,
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
        let mut links = self.links();
        links.runs += 1;
        let run = links.runs;
        links.nodes.insert(node.id(), (run, node));
    }

    /// Takes `osd` off the network (it crashed); its node, to stop.
    pub fn detach(&self, osd: OsdId) -> Option<Node> {
        self.links().nodes.remove(&osd).map(|(_, node)| node)
    }

    pub fn node(&self, osd: OsdId) -> Option<Node> {
        self.links().nodes.get(&osd).map(|(_, node)| node.clone())
    }

    fn run_of(&self, osd: OsdId) -> Option<u64> {
        self.links().nodes.get(&osd).map(|(run, _)| *run)
    }

    /// `osd`'s node if it is still in run `run`.
    fn node_in(&self, osd: OsdId, run: u64) -> Option<Node> {
        let links = self.links();
        links
            .nodes
            .get(&osd)
            .filter(|(now, _)| *now == run)
            .map(|(_, node)| node.clone())
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

    /// How each held request was answered so far (an error: no answer, and why).
    pub fn held_outcomes(&self) -> Vec<Result<OsdReply, String>> {
        self.links().held_outcomes.clone()
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
        let Some(run) = self.run_of(to) else {
            tokio::time::sleep(REFUSED_AFTER).await;
            return Err(format!("osd.{} refused the connection", to.0));
        };
        let deadline = tokio::time::Instant::now() + PEER_TIMEOUT;
        let (reply, replied) = oneshot::channel();
        let held = self.held(from, to, &request);
        let courier = Courier {
            net: self.clone(),
            from,
            to,
            run,
            held,
        };
        tokio::spawn(courier.carry(request, data, reply));
        match tokio::time::timeout_at(deadline, replied).await {
            Ok(Ok(outcome)) => outcome,
            // Lost on the way, either way: nothing comes before the time runs out.
            Ok(Err(_)) => {
                tokio::time::sleep_until(deadline).await;
                Err(format!(
                    "osd.{} did not answer within {PEER_TIMEOUT:?}",
                    to.0
                ))
            }
            Err(_) => Err(format!(
                "osd.{} did not answer within {PEER_TIMEOUT:?}",
                to.0
            )),
        }
    }
}

/// One request's trip to its OSD and its reply's trip back, on a task of the world's own.
struct Courier {
    net: Arc<Net>,
    from: Option<OsdId>,
    to: OsdId,
    /// The run of `to` it was sent to.
    run: u64,
    /// A script's extra delay on the way there.
    held: Duration,
}

impl Courier {
    /// Delivers `request`, and its reply to `reply` unless it is lost (dropping `reply`).
    async fn carry(
        self,
        request: OsdRequest,
        data: Bytes,
        reply: oneshot::Sender<Result<(OsdReply, Bytes), String>>,
    ) {
        let outcome = self.deliver(request, data).await;
        if !self.held.is_zero() {
            let noted = match &outcome {
                Some(Ok((answer, _))) => Ok(answer.clone()),
                Some(Err(why)) => Err(why.clone()),
                None => Err("lost".into()),
            };
            self.net.links().held_outcomes.push(noted);
        }
        if let Some(outcome) = outcome {
            let _ = reply.send(outcome);
        }
    }

    /// The reply, an error the sender sees at once (the link closed), or `None` if the
    /// request or its reply was lost.
    async fn deliver(
        &self,
        request: OsdRequest,
        data: Bytes,
    ) -> Option<Result<(OsdReply, Bytes), String>> {
        let net = &self.net;
        tokio::time::sleep(net.delay() + self.held).await;
        if !net.reaches(self.from, self.to) || net.lost() {
            return None;
        }
        let closed = || Some(Err(format!("osd.{}: the link closed", self.to.0)));
        // Only the serving task holds the node, so a crash can close its store meanwhile.
        let Some(server) = net.node_in(self.to, self.run) else {
            return closed();
        };
        let (answer, answered) = oneshot::channel();
        let caller = caller(self.from);
        server.clone().spawn(async move {
            let reply = server.serve(&caller, request, data).await;
            let _ = answer.send(reply);
        });
        let Ok(answer) = answered.await else {
            // The OSD stopped while it served.
            return closed();
        };
        tokio::time::sleep(net.delay()).await;
        if !net.reaches(self.from, self.to) || net.lost() {
            return None;
        }
        Some(Ok(answer))
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

    /// A simulated call is handed to the world's courier as it starts: no task of the OSD's
    /// own is left to send it.
    fn sends_waiting(&self, _osd: OsdId) -> bool {
        false
    }
}
