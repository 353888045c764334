//! `coffer dashboard`: the web dashboard (docs/dashboard.md). `coffer up` runs `coffer
//! dashboard serve`: HTTPS with a certificate of its own, behind a login (dashboard users,
//! `coffer dashboard user`), server-rendered pages of the cluster's state from the monitors,
//! the gateway's pool and the daemons' metrics, and the operator's actions, each confirmed
//! first and each also a CLI command. Everything it serves is in this binary: no script, no
//! CDN.
//!
//! The shell here gathers and routes; `pages` renders, `actions` reads and describes forms,
//! `history` parses metrics and draws charts, `users` keeps users and sessions.

mod actions;
mod history;
pub mod pages;
pub mod users;

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use client::{Cluster, Conf};
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Method, Request, Response, StatusCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::admin::Who;
use history::{History, OsdFigures};
use pages::{escape, table, Field, Frame};
use users::{Role, Session, Sessions, Users};

/// Where `coffer up`'s dashboard listens unless told otherwise.
pub const LISTEN_DEFAULT: &str = "127.0.0.1:8443";
/// The dashboard's directory in the cluster's: its certificate, users and log.
pub const DIR: &str = "dashboard";
/// The session cookie.
const COOKIE: &str = "coffer_session";
/// Largest form body read.
const FORM_BYTES_MAX: usize = 64 << 10;
/// A failed login waits this long before its answer, to slow guessing.
const LOGIN_FAILED_PAUSE: Duration = Duration::from_secs(1);
/// How long a scrape of one daemon's metrics may take.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(3);
/// Images listed per pool.
const IMAGES_LISTED_MAX: usize = 200;

#[derive(clap::Args)]
pub struct DashboardCli {
    #[command(subcommand)]
    command: DashboardCommand,
}

#[derive(clap::Subcommand)]
enum DashboardCommand {
    /// Serves the dashboard over HTTPS until SIGINT or SIGTERM (coffer up runs it).
    Serve(ServeArgs),
    /// The dashboard's users (kept in DIR/dashboard/users.json on its host).
    #[command(subcommand)]
    User(UserCommand),
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Where to listen (default: the configuration's [dashboard] listen, else 127.0.0.1:8443).
    #[arg(long)]
    listen: Option<String>,
    /// Write this process's id here once serving.
    #[arg(long)]
    pid_file: Option<PathBuf>,
}

#[derive(clap::Subcommand)]
enum UserCommand {
    /// Adds a user with a new password, printed once; admins change the cluster, read-only
    /// users see it.
    Add {
        name: String,
        #[arg(long)]
        read_only: bool,
    },
    /// Lists the users and their roles.
    Ls,
    /// Removes a user (its sessions end at their next request... or in eight hours).
    Rm { name: String },
}

/// The dashboard's directory for the configuration at `conf`.
pub fn dir(conf: &Conf) -> PathBuf {
    conf.dir.join(DIR)
}

pub fn command(who: &Who, cli: DashboardCli) -> Result<(), String> {
    match cli.command {
        DashboardCommand::Serve(args) => serve(who, args),
        DashboardCommand::User(command) => {
            let conf_path = Conf::locate(who.conf.as_deref());
            let conf = Conf::load(&conf_path).map_err(|e| e.to_string())?;
            let users = Users::at(&dir(&conf));
            match command {
                UserCommand::Add { name, read_only } => {
                    let role = if read_only {
                        Role::ReadOnly
                    } else {
                        Role::Admin
                    };
                    let password = users::generate_password();
                    users.add(&name, role, &password)?;
                    println!("dashboard user {name} ({}) added", role.name());
                    println!("password: {password}");
                }
                UserCommand::Ls => {
                    for (name, role) in users.list()? {
                        println!("{name}  {}", role.name());
                    }
                }
                UserCommand::Rm { name } => {
                    users.remove(&name)?;
                    println!("dashboard user {name} removed");
                }
            }
            Ok(())
        }
    }
}

/// Makes the first user, `admin`, with its password in a private file beside the users,
/// unless the dashboard has users; returns where the password is.
pub fn ensure_admin(dir: &Path) -> Result<PathBuf, String> {
    let path = dir.join(users::ADMIN_PASSWORD_FILE);
    let users = Users::at(dir);
    if !users.exists() {
        let password = users::generate_password();
        users.add(users::ADMIN, Role::Admin, &password)?;
        crate::up::write_private(&path, &format!("{password}\n"))?;
    }
    Ok(path)
}

struct State {
    cluster: Cluster,
    conf: Conf,
    users: Users,
    sessions: Sessions,
    history: Mutex<History>,
}

fn serve(who: &Who, args: ServeArgs) -> Result<(), String> {
    let (conf, runtime, cluster) = crate::admin::connect_waiting(who)?;
    let listen = args
        .listen
        .or_else(|| conf.dashboard.as_ref().map(|d| d.listen.clone()))
        .unwrap_or_else(|| LISTEN_DEFAULT.into());
    let dir = dir(&conf);
    let cert = dir.join(gateway::tls::CERT_FILE);
    if !cert.exists() {
        return Err(format!(
            "no certificate at {}: coffer up makes one",
            cert.display()
        ));
    }
    let tls = gateway::serve::tls_config(&cert, &dir.join(gateway::tls::KEY_FILE))?;
    let state = Arc::new(State {
        cluster,
        users: Users::at(&dir),
        conf,
        sessions: Sessions::default(),
        history: Mutex::new(History::default()),
    });
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&listen)
            .await
            .map_err(|e| format!("the dashboard cannot listen on {listen}: {e}"))?;
        if let Some(path) = &args.pid_file {
            std::fs::write(path, format!("{}\n", std::process::id()))
                .map_err(|e| format!("{}: {e}", path.display()))?;
        }
        println!("coffer dashboard: serving at https://{listen}");
        tokio::spawn(sample(state.clone()));
        let service = hyper::service::service_fn(move |request| {
            let state = state.clone();
            async move { Ok::<_, std::convert::Infallible>(handle(&state, request).await) }
        });
        let serving = tokio::spawn(gateway::serve::serve_with(listener, Some(tls), service));
        tokio::select! {
            result = crate::daemon::stop_signal() => result,
            _ = serving => Err("serving stopped".into()),
        }
    })
}

/// Scrapes the OSDs' metrics into the history, every [`history::SCRAPE_EVERY`].
async fn sample(state: Arc<State>) {
    let mut tick = tokio::time::interval(history::SCRAPE_EVERY);
    loop {
        tick.tick().await;
        let mut scraped = BTreeMap::new();
        for (name, addr) in &state.conf.metrics {
            if !name.starts_with("osd.") {
                continue;
            }
            if let Some(text) = scrape(addr).await {
                let figures = OsdFigures::from_samples(&history::parse(&text));
                scraped.insert(name.clone(), figures);
            }
        }
        let now = unix_seconds();
        state
            .history
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .record(now, scraped);
    }
}

fn unix_seconds() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// A daemon's metrics text, or `None` when it does not answer in time.
async fn scrape(addr: &str) -> Option<String> {
    let fetch = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        let request = format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.ok()?;
        let answer = String::from_utf8(answer).ok()?;
        let (head, body) = answer.split_once("\r\n\r\n")?;
        head.contains(" 200 ").then(|| body.to_string())
    };
    tokio::time::timeout(SCRAPE_TIMEOUT, fetch).await.ok()?
}

fn response(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    let fixed = [
        ("content-type", "text/html; charset=utf-8"),
        ("cache-control", "no-store"),
        ("x-frame-options", "DENY"),
        ("referrer-policy", "no-referrer"),
        ("x-content-type-options", "nosniff"),
        (
            "content-security-policy",
            "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; form-action 'self'; \
             frame-ancestors 'none'",
        ),
    ];
    for (name, value) in fixed {
        headers.insert(name, hyper::header::HeaderValue::from_static(value));
    }
    response
}

fn redirect(to: &str, cookie: Option<String>) -> Response<Full<Bytes>> {
    let mut answer = response(StatusCode::SEE_OTHER, String::new());
    if let Ok(value) = hyper::header::HeaderValue::from_str(to) {
        answer.headers_mut().insert(hyper::header::LOCATION, value);
    }
    if let Some(value) = cookie.and_then(|c| hyper::header::HeaderValue::from_str(&c).ok()) {
        answer
            .headers_mut()
            .insert(hyper::header::SET_COOKIE, value);
    }
    answer
}

/// The session cookie's token in a request's `Cookie` header.
fn session_cookie(request: &Request<hyper::body::Incoming>) -> Option<String> {
    request
        .headers()
        .get_all(hyper::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| {
            pair.trim()
                .strip_prefix(&format!("{COOKIE}="))
                .map(str::to_string)
        })
}

/// A form body's fields, or why it could not be read.
async fn form(request: Request<hyper::body::Incoming>) -> Result<Vec<(String, String)>, String> {
    let body = Limited::new(request.into_body(), FORM_BYTES_MAX)
        .collect()
        .await
        .map_err(|e| format!("reading the form: {e}"))?
        .to_bytes();
    Ok(form_urlencoded::parse(&body).into_owned().collect())
}

fn field<'a>(fields: &'a [(String, String)], name: &str) -> &'a str {
    fields
        .iter()
        .find(|(n, _)| n == name)
        .map_or("", |(_, v)| v.as_str())
}

async fn handle(state: &State, request: Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
    let path = request.uri().path().to_string();
    let method = request.method().clone();
    let cookie = session_cookie(&request);
    let session = cookie.as_deref().and_then(|c| state.sessions.get(c));
    match (&method, path.as_str(), session) {
        (&Method::GET, "/login", _) => response(StatusCode::OK, pages::login(None)),
        (&Method::POST, "/login", _) => login(state, request).await,
        (_, _, None) if method == Method::GET => redirect("/login", None),
        (_, _, None) => response(StatusCode::UNAUTHORIZED, pages::login(Some("log in first"))),
        (&Method::POST, "/logout", Some(session)) => {
            let fields = form(request).await.unwrap_or_default();
            if field(&fields, "form_token") != session.form_token {
                return response(StatusCode::FORBIDDEN, "stale form: reload the page".into());
            }
            if let Some(cookie) = cookie {
                state.sessions.close(&cookie);
            }
            redirect(
                "/login",
                Some(format!(
                    "{COOKIE}=; Path=/; Max-Age=0; Secure; HttpOnly; SameSite=Strict"
                )),
            )
        }
        (&Method::POST, "/action", Some(session)) => action(state, &session, request).await,
        (&Method::GET, _, Some(session)) => page(state, &session, &path).await,
        _ => response(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("{method} {}: not served", escape(&path)),
        ),
    }
}

async fn login(state: &State, request: Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
    let fields = match form(request).await {
        Ok(fields) => fields,
        Err(why) => return response(StatusCode::BAD_REQUEST, pages::login(Some(&why))),
    };
    let (user, password) = (
        field(&fields, "user").to_string(),
        field(&fields, "password").to_string(),
    );
    let users = state.users.clone();
    let checked =
        tokio::task::spawn_blocking(move || users.check(&user, &password).map(|r| (user, r))).await;
    match checked {
        Ok(Ok((user, Some(role)))) => {
            tracing::info!(%user, role = role.name(), "dashboard login");
            let token = state.sessions.open(&user, role);
            let cookie = format!(
                "{COOKIE}={token}; Path=/; Max-Age={}; Secure; HttpOnly; SameSite=Strict",
                users::SESSION_LIFETIME.as_secs()
            );
            redirect("/", Some(cookie))
        }
        Ok(Ok((user, None))) => {
            tracing::warn!(%user, "dashboard login refused");
            tokio::time::sleep(LOGIN_FAILED_PAUSE).await;
            response(
                StatusCode::UNAUTHORIZED,
                pages::login(Some("wrong user or password")),
            )
        }
        Ok(Err(why)) => response(StatusCode::INTERNAL_SERVER_ERROR, pages::login(Some(&why))),
        Err(e) => response(
            StatusCode::INTERNAL_SERVER_ERROR,
            pages::login(Some(&e.to_string())),
        ),
    }
}

fn now_text() -> String {
    crate::text::date((unix_seconds() * 1e9) as i128)
}

async fn action(
    state: &State,
    session: &Session,
    request: Request<hyper::body::Incoming>,
) -> Response<Full<Bytes>> {
    let gathered = now_text();
    let frame = Frame {
        path: "/action",
        user: &session.user,
        role: session.role,
        form_token: &session.form_token,
        gathered: &gathered,
    };
    let fields = match form(request).await {
        Ok(fields) => fields,
        Err(why) => return response(StatusCode::BAD_REQUEST, escape(&why)),
    };
    if field(&fields, "form_token") != session.form_token {
        return response(
            StatusCode::FORBIDDEN,
            "stale form: reload the page and try again".into(),
        );
    }
    if session.role != Role::Admin {
        let body = "<p id=\"refused\" class=\"err\">Read-only users see the cluster; an admin \
                    changes it.</p>";
        return response(
            StatusCode::FORBIDDEN,
            pages::layout(&frame, "Refused", body),
        );
    }
    let action = match actions::Action::from_form(&fields) {
        Ok(action) => action,
        Err(why) => {
            let done = pages::done(&frame, &Err(why), None);
            return response(StatusCode::BAD_REQUEST, done);
        }
    };
    if field(&fields, "confirm") != "yes" {
        return response(
            StatusCode::OK,
            pages::confirm(&frame, &action.describe(), &fields),
        );
    }
    tracing::info!(user = %session.user, ?action, "dashboard action");
    let done = actions::run(&state.cluster, &state.conf, &action).await;
    let status = if done.outcome.is_ok() {
        StatusCode::OK
    } else {
        StatusCode::CONFLICT
    };
    response(
        status,
        pages::done(&frame, &done.outcome, done.shown_once.as_deref()),
    )
}

async fn page(state: &State, session: &Session, path: &str) -> Response<Full<Bytes>> {
    let Some((_, title)) = pages::PAGES.iter().find(|(p, _)| *p == path) else {
        return response(
            StatusCode::NOT_FOUND,
            format!("{}: no such page", escape(path)),
        );
    };
    let gathered = now_text();
    let frame = Frame {
        path,
        user: &session.user,
        role: session.role,
        form_token: &session.form_token,
        gathered: &gathered,
    };
    let body = match path {
        "/" => health(state).await,
        "/osds" => osds(state, &frame).await,
        "/pools" => pools(state, &frame).await,
        "/pgs" => pgs(state).await,
        "/images" => images(state).await,
        "/s3" => s3(state, &frame).await,
        "/kms" => kms(state, &frame).await,
        _ => filesystems(state, &frame).await,
    };
    let body =
        body.unwrap_or_else(|why| format!("<p class=\"err\" id=\"failed\">{}</p>", escape(&why)));
    response(StatusCode::OK, pages::layout(&frame, title, &body))
}

async fn status(state: &State) -> Result<messenger::message::MonStatus, String> {
    state
        .cluster
        .status()
        .await
        .map_err(|e| format!("asking the monitors: {e}"))
}

fn rate(bytes: f64) -> String {
    format!("{}/s", pages::bytes(bytes))
}

async fn health(state: &State) -> Result<String, String> {
    let status = status(state).await?;
    let dir = state.conf.dir.clone();
    let supervised = tokio::task::spawn_blocking(move || crate::supervise::status(&dir))
        .await
        .unwrap_or(None);
    let (word, reasons) =
        crate::admin::verdict(&status, supervised.as_ref().map(|(_, w, _)| &w[..]));
    let mut body = format!("<p>{}</p>", pages::verdict(word));
    body.push_str("<ul id=\"reasons\">");
    for reason in reasons.iter().chain(&status.inactive) {
        let _ = write!(body, "<li>{}</li>", escape(reason));
    }
    body.push_str("</ul>");
    let map = &status.map;
    let up = map.osds.values().filter(|o| o.up).count();
    let is_in = map.osds.values().filter(|o| o.is_in).count();
    let pgs: Vec<String> = status.pgs.iter().map(|(s, n)| format!("{n} {s}")).collect();
    let mut rows = vec![
        vec![
            "monitors".into(),
            escape(&format!(
                "{}, leader {}",
                status.monitors.len(),
                status.leader.as_deref().unwrap_or("none")
            )),
        ],
        vec![
            "OSDs".into(),
            format!("{} OSDs: {up} up, {is_in} in", map.osds.len()),
        ],
        vec![
            "pools".into(),
            format!("{} pools, map epoch {}", map.pools.len(), map.epoch),
        ],
        vec!["placement groups".into(), escape(&pgs.join(", "))],
        vec![
            "usage".into(),
            format!(
                "{} used of {}",
                pages::bytes(status.used_bytes as f64),
                pages::bytes(status.total_bytes as f64)
            ),
        ],
    ];
    if let Some((line, _, _)) = &supervised {
        rows.push(vec!["daemons".into(), escape(line)]);
    }
    body.push_str(&table("summary", &[], &rows));
    let history = state.history.lock().unwrap_or_else(|p| p.into_inner());
    let now = unix_seconds();
    body.push_str("<h2>The last hour</h2>");
    body.push_str(&history::chart(
        "Throughput",
        &history.points,
        now,
        &history::read_write(|p| p.read_bytes_per_s, |p| p.write_bytes_per_s),
        rate,
    ));
    body.push_str(&history::chart(
        "Operations",
        &history.points,
        now,
        &history::read_write(|p| p.read_ops_per_s, |p| p.write_ops_per_s),
        |v| format!("{v:.0}/s"),
    ));
    body.push_str(&history::chart(
        "Mean latency at the OSDs",
        &history.points,
        now,
        &history::read_write(|p| p.read_latency_s, |p| p.write_latency_s),
        pages::latency,
    ));
    Ok(body)
}

async fn osds(state: &State, frame: &Frame<'_>) -> Result<String, String> {
    let status = status(state).await?;
    let usage: BTreeMap<_, _> = status.osd_usage.iter().copied().collect();
    let history = state.history.lock().unwrap_or_else(|p| p.into_inner());
    let mut rows = Vec::new();
    for osd in status.map.osds.values() {
        let name = format!("osd.{}", osd.id.0);
        let space = usage.get(&osd.id);
        let used = space.map_or("-".into(), |u| {
            let share = if u.total_bytes > 0 {
                100.0 * u.used_bytes as f64 / u.total_bytes as f64
            } else {
                0.0
            };
            format!(
                "{} of {} ({share:.1} %)",
                crate::text::approximate(u.used_bytes),
                crate::text::approximate(u.total_bytes)
            )
        });
        let free = space
            .filter(|u| u.host_free_bytes != u64::MAX)
            .map_or("-".into(), |u| crate::text::approximate(u.host_free_bytes));
        let (read, write) = history.osd_latency.get(&name).copied().unwrap_or_default();
        let id = osd.id.0.to_string();
        let button = if osd.is_in {
            pages::action_form(frame, "osd-out", &[Field::Hidden("osd", &id)], "Mark out")
        } else {
            pages::action_form(frame, "osd-in", &[Field::Hidden("osd", &id)], "Mark in")
        };
        let space_word = match osd.space {
            map::cluster::Space::Ok => "ok",
            map::cluster::Space::NearFull => "nearfull",
            map::cluster::Space::Full => "full",
        };
        rows.push(vec![
            escape(&name),
            escape(&osd.host),
            if osd.up {
                "<span class=\"ok\">up</span>".into()
            } else {
                "<span class=\"err\">down</span>".into()
            },
            if osd.is_in {
                "in".into()
            } else {
                "<span class=\"warn\">out</span>".into()
            },
            space_word.into(),
            used,
            free,
            format!("{} / {}", pages::latency(read), pages::latency(write)),
            button,
        ]);
    }
    Ok(table(
        "osds",
        &[
            "OSD",
            "host",
            "state",
            "in",
            "space",
            "store used",
            "host free",
            "latency read / write",
            "",
        ],
        &rows,
    ))
}

async fn pools(state: &State, frame: &Frame<'_>) -> Result<String, String> {
    let status = status(state).await?;
    let mut rows = Vec::new();
    for pool in status.map.pools.values() {
        let id = pool.id.0.to_string();
        let states: Vec<String> = status
            .pool_pgs
            .iter()
            .filter(|(p, _, _)| *p == pool.id)
            .map(|(_, state, n)| format!("{n} {state}"))
            .collect();
        let seal = match pool.seal {
            map::cluster::Seal::Edge { key } => format!("edge (data key {key})"),
            map::cluster::Seal::Osd => "osd (each store's at-rest mode)".into(),
        };
        let usage = status
            .pool_usage
            .iter()
            .find(|(p, _)| *p == pool.id)
            .map(|(_, u)| *u)
            .unwrap_or_default();
        rows.push(vec![
            id,
            escape(&pool.name),
            format!("{} copies, {} to write", pool.size, pool.min_size),
            pool.pg_num.to_string(),
            escape(&states.join(", ")),
            usage.objects.to_string(),
            crate::text::approximate(usage.stored_bytes),
            crate::text::approximate(usage.used_bytes),
            crate::text::approximate(usage.max_avail_bytes),
            escape(&seal),
        ]);
    }
    let mut body = table(
        "pools",
        &[
            "id",
            "name",
            "size",
            "PGs",
            "PGs by state",
            "objects",
            "stored",
            "used (all copies)",
            "room",
            "sealed",
        ],
        &rows,
    );
    let edge = crate::admin::mon_links_secure(&state.conf).unwrap_or(false);
    let seals: &[&str] = if edge { &["edge", "osd"] } else { &["osd"] };
    let pg_num = crate::admin::DEFAULT_PG_NUM.to_string();
    body.push_str(&pages::action_form(
        frame,
        "pool-create",
        &[
            Field::Text("name", "New pool", ""),
            Field::Text("pg_num", "Placement groups", &pg_num),
            Field::Choice("seal", "Sealed at", seals),
        ],
        "Create pool",
    ));
    Ok(body)
}

async fn pgs(state: &State) -> Result<String, String> {
    let status = status(state).await?;
    let rows: Vec<Vec<String>> = status
        .pgs
        .iter()
        .map(|(s, n)| vec![escape(s), n.to_string()])
        .collect();
    let mut body = table("pg-states", &["state", "PGs"], &rows);
    if !status.inactive.is_empty() {
        body.push_str("<h2>Not taking writes</h2><ul>");
        for line in &status.inactive {
            let _ = write!(body, "<li>{}</li>", escape(line));
        }
        body.push_str("</ul>");
    }
    body.push_str("<h2>Recovery</h2>");
    let history = state.history.lock().unwrap_or_else(|p| p.into_inner());
    let recovering = status.pgs.get("active+recovering").copied().unwrap_or(0);
    let pending = status.recovery_pending;
    let _ = write!(
        body,
        "<p id=\"recovery\">{recovering} PGs recovering; {pending} objects left to copy.</p>"
    );
    let rows: Vec<Vec<String>> = history
        .osds
        .iter()
        .map(|(osd, f)| {
            vec![
                escape(osd),
                format!("{:.0}", f.recovery_pending),
                format!("{:.0}", f.recovered_objects),
            ]
        })
        .collect();
    body.push_str(&table(
        "recovery-by-osd",
        &[
            "primary",
            "objects left to copy",
            "objects copied since it started",
        ],
        &rows,
    ));
    Ok(body)
}

async fn images(state: &State) -> Result<String, String> {
    let map = state.cluster.map();
    let mut rows = Vec::new();
    for pool in map.pools.values() {
        let Ok(opened) = state.cluster.pool(&pool.name).await else {
            continue;
        };
        let names = block::image::list(&opened).await.unwrap_or_default();
        for name in names.iter().take(IMAGES_LISTED_MAX) {
            let (size, lock) = match block::image::info(&opened, name).await {
                Ok(info) => (
                    pages::bytes(info.header.size as f64),
                    info.lock.map_or("-".into(), |l| {
                        escape(&format!(
                            "{} ({}, {} on {})",
                            l.entity, l.purpose, l.pid, l.host
                        ))
                    }),
                ),
                Err(e) => (escape(&e.to_string()), "-".into()),
            };
            rows.push(vec![escape(&pool.name), escape(name), size, lock]);
        }
    }
    Ok(table(
        "images",
        &["pool", "image", "size", "held by"],
        &rows,
    ))
}

async fn s3(state: &State, frame: &Frame<'_>) -> Result<String, String> {
    let pool_name = crate::gw::pool_name(&state.conf, None);
    let pool = state
        .cluster
        .pool(&pool_name)
        .await
        .map_err(|e| format!("the gateway's pool {pool_name}: {e}"))?;
    let users = gateway::users::list(&pool)
        .await
        .map_err(|e| e.to_string())?;
    let rows: Vec<Vec<String>> = users
        .iter()
        .map(|u| vec![escape(&u.name), escape(&crate::gw::key_ids(u))])
        .collect();
    let mut body = String::from("<h2>Users</h2>");
    body.push_str(&table("s3-users", &["user", "access key"], &rows));
    body.push_str(&pages::action_form(
        frame,
        "user-create",
        &[Field::Text("name", "New user", "")],
        "Create user",
    ));
    let buckets = gateway::buckets::list(&pool)
        .await
        .map_err(|e| e.to_string())?;
    let rows: Vec<Vec<String>> = buckets
        .iter()
        .map(|(name, info)| {
            vec![
                escape(name),
                escape(&info.owner),
                escape(&crate::text::date(i128::from(info.created_ns))),
            ]
        })
        .collect();
    body.push_str("<h2>Buckets</h2>");
    body.push_str(&table("s3-buckets", &["bucket", "owner", "created"], &rows));
    Ok(body)
}

async fn kms(state: &State, frame: &Frame<'_>) -> Result<String, String> {
    let keys = state.cluster.kms_keys().await.map_err(|e| e.to_string())?;
    let rows: Vec<Vec<String>> = keys
        .iter()
        .map(|k| {
            let rotate = if k.name.starts_with("pool.") {
                "<span class=\"note\">a pool's key: coffer pool rotate-key</span>".into()
            } else {
                pages::action_form(
                    frame,
                    "kms-rotate",
                    &[Field::Hidden("name", &k.name)],
                    "Rotate",
                )
            };
            vec![
                escape(&k.name),
                k.versions.to_string(),
                escape(&crate::text::date(i128::from(k.created_ns))),
                rotate,
            ]
        })
        .collect();
    let mut body = table("kms-keys", &["key", "versions", "created", ""], &rows);
    body.push_str("<p class=\"note\">Names and versions only: key material never leaves the monitors but wrapped, or in a data key to a client that may use it.</p>");
    Ok(body)
}

async fn filesystems(state: &State, frame: &Frame<'_>) -> Result<String, String> {
    let map = state.cluster.map();
    let mut body = String::new();
    let pool_name = |id| {
        map.pools
            .get(&id)
            .map_or("?".to_string(), |p| p.name.clone())
    };
    let mut rows = Vec::new();
    let mut names = Vec::new();
    for fs in map.filesystems.values() {
        names.push(fs.name.clone());
        let mds = fs
            .mds
            .as_ref()
            .map_or("none".into(), |m| format!("{} at {}", m.name, m.addr));
        let clients = match crate::files::sessions(&state.cluster, &fs.name).await {
            Ok(sessions) if sessions.is_empty() => "none mounted".into(),
            Ok(sessions) => sessions
                .iter()
                .map(|s| format!("{} at {} ({} open)", s.entity, s.root, s.opens))
                .collect::<Vec<_>>()
                .join("; "),
            Err(why) => why,
        };
        rows.push(vec![
            escape(&fs.name),
            escape(&pool_name(fs.meta_pool)),
            escape(&pool_name(fs.data_pool)),
            escape(&mds),
            escape(&clients),
        ]);
    }
    body.push_str(&table(
        "filesystems",
        &[
            "file system",
            "metadata pool",
            "data pool",
            "metadata daemon",
            "clients",
        ],
        &rows,
    ));
    body.push_str(&pages::action_form(
        frame,
        "fs-create",
        &[Field::Text("name", "New file system", "")],
        "Create file system",
    ));
    let choices: Vec<&str> = names.iter().map(String::as_str).collect();
    if !choices.is_empty() {
        body.push_str(&pages::action_form(
            frame,
            "fs-authorize",
            &[
                Field::Choice("fs", "File system", &choices),
                Field::Text("entity", "Client (client.NAME)", ""),
                Field::Text("path", "Path", "/"),
                Field::Choice("access", "Access", &["rw", "r"]),
            ],
            "Authorize client",
        ));
    }
    Ok(body)
}
