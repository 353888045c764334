//! Each daemon's metrics endpoint (docs/metrics.md): plain HTTP/1.1, as Prometheus scrapes
//! (the figures carry no data, no object names and no keys), `GET /metrics` and nothing
//! else of use, on the address the configuration gives the daemon in its `[metrics]`
//! section.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request, Response, StatusCode};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// Pause before trying again to listen on an address that is taken.
const LISTEN_RETRY: Duration = Duration::from_secs(5);

/// The two text formats a scraper may ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text format 0.0.4: what `promtool check metrics` and curl get.
    Prometheus,
    /// OpenMetrics 1.0, for a scraper whose `Accept` names it (Prometheus does).
    OpenMetrics,
}

impl Format {
    /// The format an `Accept` header asks for.
    pub fn accepted(accept: &str) -> Format {
        if accept.contains("application/openmetrics-text") {
            Format::OpenMetrics
        } else {
            Format::Prometheus
        }
    }

    fn content_type(self) -> &'static str {
        match self {
            Format::Prometheus => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// `registry` in `format`.
pub fn render(registry: &Registry, format: Format) -> String {
    let mut text = String::new();
    let encoded = match format {
        Format::Prometheus => {
            prometheus_client::encoding::prometheus_text::encode(&mut text, registry)
        }
        Format::OpenMetrics => prometheus_client::encoding::text::encode(&mut text, registry),
    };
    // Writing to a String fails only if a metric's own encoding does, which would be a bug
    // in it; the scraper gets what was written and the log says why it stopped.
    if let Err(e) = encoded {
        tracing::error!(error = %e, "encoding metrics");
    }
    text
}

/// The answer to one request: the metrics, a pointer to them at `/`, or an error.
fn answer(registry: &Registry, method: &Method, path: &str, accept: &str) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match (method, path) {
        (&Method::GET | &Method::HEAD, "/metrics") => {
            let format = Format::accepted(accept);
            (
                StatusCode::OK,
                format.content_type(),
                render(registry, format),
            )
        }
        (&Method::GET | &Method::HEAD, "/") => (
            StatusCode::OK,
            "text/plain; charset=utf-8",
            "Coffer: Prometheus metrics at /metrics\n".to_string(),
        ),
        (&Method::GET | &Method::HEAD, _) => (
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            format!("{path}: not found; metrics are at /metrics\n"),
        ),
        _ => (
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain; charset=utf-8",
            format!("{method}: this endpoint answers GET only\n"),
        ),
    };
    let body = if method == Method::HEAD {
        Bytes::new()
    } else {
        Bytes::from(body)
    };
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    if let Ok(value) = hyper::header::HeaderValue::from_str(content_type) {
        response
            .headers_mut()
            .insert(hyper::header::CONTENT_TYPE, value);
    }
    response
}

/// Serves a daemon's metrics, `register`ed in a fresh registry (with the process's own and
/// the crypto counters), at `addr` if there is one (the daemon's entry in the configuration,
/// or its `--metrics`); in a task of its own for the life of the runtime.
pub fn start(addr: Option<&String>, register: impl FnOnce(&mut Registry)) {
    if let Some(addr) = addr {
        spawn(addr.clone(), metrics::registry(register));
    }
}

/// Serves `registry` at `http://ADDR/metrics` in a task of its own, until it is aborted. An
/// address that is taken does not stop the daemon: the task says so once and tries again
/// every few seconds.
fn spawn(addr: String, registry: Registry) -> JoinHandle<()> {
    let registry = Arc::new(registry);
    let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
        let accept = request
            .headers()
            .get(hyper::header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let response = answer(&registry, request.method(), request.uri().path(), accept);
        async move { Ok::<_, std::convert::Infallible>(response) }
    });
    tokio::spawn(async move {
        let mut said = false;
        loop {
            let listener = match TcpListener::bind(&addr).await {
                Ok(listener) => listener,
                Err(e) => {
                    if !said {
                        tracing::warn!(
                            "metrics cannot listen on {addr} yet ({e}); trying again every {}s",
                            LISTEN_RETRY.as_secs()
                        );
                        said = true;
                    }
                    tokio::time::sleep(LISTEN_RETRY).await;
                    continue;
                }
            };
            tracing::info!(%addr, "metrics at http://{addr}/metrics");
            // Served as the gateway serves, in plain HTTP; it ends only when accepting fails
            // (out of descriptors, most likely), and then listens again after a pause.
            let served = gateway::serve::serve_with(listener, None, service.clone()).await;
            if let Err(e) = served {
                tracing::warn!("metrics at {addr} stopped accepting ({e}); listening again");
            }
            tokio::time::sleep(LISTEN_RETRY).await;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;

    fn registry() -> Registry {
        let mut registry = Registry::default();
        let counter: Counter = Counter::default();
        counter.inc_by(3);
        registry
            .sub_registry_with_prefix("coffer")
            .register("writes", "Writes", counter);
        registry
    }

    #[test]
    fn a_scraper_gets_the_format_it_accepts() {
        assert_eq!(Format::accepted(""), Format::Prometheus);
        assert_eq!(
            Format::accepted("text/plain;version=0.0.4"),
            Format::Prometheus
        );
        let prometheus = "application/openmetrics-text;version=1.0.0,application/\
                          openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5";
        assert_eq!(Format::accepted(prometheus), Format::OpenMetrics);
        let text = render(&registry(), Format::Prometheus);
        assert!(text.contains("# TYPE coffer_writes_total counter\ncoffer_writes_total 3\n"));
        assert!(!text.contains("# EOF"));
        let open = render(&registry(), Format::OpenMetrics);
        assert!(open.contains("# TYPE coffer_writes counter\ncoffer_writes_total 3\n"));
        assert!(open.ends_with("# EOF\n"));
    }

    #[test]
    fn only_get_of_metrics_answers_with_them() {
        let registry = registry();
        let ok = answer(&registry, &Method::GET, "/metrics", "");
        assert_eq!(ok.status(), StatusCode::OK);
        assert_eq!(
            answer(&registry, &Method::GET, "/other", "").status(),
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            answer(&registry, &Method::POST, "/metrics", "").status(),
            StatusCode::METHOD_NOT_ALLOWED
        );
    }
}
