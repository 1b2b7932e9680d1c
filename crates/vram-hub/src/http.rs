//! The requests: ureq on rustls, redirects followed by hand so that the token goes only to
//! its own endpoint and a `Range` holds on every hop, transient failures tried again.

use std::cell::Cell;
use std::io::Read;
use std::time::Duration;

use ureq::http::{HeaderMap, Method, Uri};
use ureq::tls::{RootCerts, TlsConfig};

use crate::env::Config;

/// Redirect hops followed at most (the Hub makes one: the CDN; a renamed repo adds one).
const MAX_HOPS: u32 = 5;

/// What a request got back.
#[derive(Debug)]
pub(crate) struct Answer {
    /// The final status (after redirects).
    pub status: u16,
    /// The final response's headers.
    pub headers: HeaderMap,
    /// Headers of the endpoint's own response, before a redirect to another host (the Hub
    /// puts `X-Linked-Etag`, `X-Linked-Size` and `X-Repo-Commit` on its 302 to the CDN);
    /// the final response's when there was none.
    pub hub_headers: HeaderMap,
    /// The body, up to the limit asked for.
    pub body: Vec<u8>,
    /// The URL that answered last (to ask it again without the Hub's redirect).
    pub url: String,
}

impl Answer {
    /// A header of the endpoint's response, else of the final one, as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.hub_headers
            .get(name)
            .or_else(|| self.headers.get(name))
            .and_then(|v| v.to_str().ok())
    }
}

/// A request that got no HTTP answer.
#[derive(Debug)]
pub(crate) struct NetFailure {
    /// What failed, one phrase (never with the token or a signed URL).
    pub reason: String,
}

/// Requests made and bytes received, for tests and for `BENCHMARKS.md`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Traffic {
    /// HTTP requests sent (each redirect hop and each retry counted).
    pub requests: u32,
    /// Body bytes received.
    pub body_bytes: u64,
}

pub(crate) struct Http {
    agent: ureq::Agent,
    cfg: Config,
    origin: Option<(String, String, u16)>,
    traffic: Cell<Traffic>,
}

impl std::fmt::Debug for Http {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Http")
            .field("endpoint", &self.cfg.endpoint)
            .field("traffic", &self.traffic.get())
            .finish()
    }
}

/// Scheme, host and port of a URL (default ports filled in), to compare origins.
fn origin(url: &str) -> Option<(String, String, u16)> {
    let uri: Uri = url.parse().ok()?;
    let scheme = uri.scheme_str()?.to_ascii_lowercase();
    let host = uri.host()?.to_ascii_lowercase();
    let port = uri
        .port_u16()
        .unwrap_or(if scheme == "https" { 443 } else { 80 });
    Some((scheme, host, port))
}

/// The path of a URL without its query (signed CDN URLs carry their signature there).
pub(crate) fn path_of(url: &str) -> String {
    url.parse::<Uri>()
        .map(|u| u.path().to_string())
        .unwrap_or_else(|_| url.split('?').next().unwrap_or(url).to_string())
}

/// The TLS failure inside an I/O error (rustls reports a refused certificate that way).
fn tls_inside(e: &ureq::Error) -> Option<&rustls::Error> {
    match e {
        ureq::Error::Io(io) => io.get_ref()?.downcast_ref::<rustls::Error>(),
        _ => None,
    }
}

fn reason(e: &ureq::Error, timeout: Duration) -> String {
    if let Some(tls) = tls_inside(e) {
        return format!(
            "TLS: {tls} (behind a proxy that re-signs TLS? point REQUESTS_CA_BUNDLE or SSL_CERT_FILE at its CA bundle)"
        );
    }
    match e {
        ureq::Error::Timeout(_) => format!(
            "no answer within {} s (HF_HUB_ETAG_TIMEOUT / HF_HUB_DOWNLOAD_TIMEOUT set the limits)",
            timeout.as_secs_f64()
        ),
        ureq::Error::HostNotFound => {
            "host not found (no network, or a proxy is needed: HTTPS_PROXY)".into()
        }
        ureq::Error::ConnectionFailed => "connection failed".into(),
        ureq::Error::Io(io) => format!("connection failed: {io}"),
        ureq::Error::Tls(_) | ureq::Error::Rustls(_) => format!(
            "TLS: {e} (behind a proxy that re-signs TLS? point REQUESTS_CA_BUNDLE or SSL_CERT_FILE at its CA bundle)"
        ),
        ureq::Error::ConnectProxyFailed(m) => format!("the proxy refused the connection: {m}"),
        ureq::Error::InvalidProxyUrl => "the proxy URL (HTTPS_PROXY / HTTP_PROXY / ALL_PROXY) is not valid".into(),
        other => other.to_string(),
    }
}

/// A connection that broke off, which a second try may not meet.
fn transient_net(e: &ureq::Error) -> bool {
    tls_inside(e).is_none() && matches!(e, ureq::Error::Io(_) | ureq::Error::ConnectionFailed)
}

fn transient_status(status: u16) -> bool {
    matches!(status, 429 | 500 | 502 | 503 | 504)
}

impl Http {
    pub fn new(cfg: &Config) -> Http {
        let roots = match &cfg.ca_bundle {
            Some((_, certs)) => RootCerts::Specific(certs.clone()),
            None => RootCerts::WebPki,
        };
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .proxy(ureq::Proxy::try_from_env())
            .tls_config(TlsConfig::builder().root_certs(roots).build())
            .user_agent(concat!("vram/", env!("CARGO_PKG_VERSION"), "; rust"))
            .timeout_global(Some(cfg.download_timeout))
            .build();
        Http {
            agent: ureq::Agent::new_with_config(config),
            origin: origin(&cfg.endpoint),
            cfg: cfg.clone(),
            traffic: Cell::new(Traffic::default()),
        }
    }

    pub fn traffic(&self) -> Traffic {
        self.traffic.get()
    }

    fn count(&self, requests: u32, bytes: u64) {
        let mut t = self.traffic.get();
        t.requests += requests;
        t.body_bytes += bytes;
        self.traffic.set(t);
    }

    /// The token goes to the endpoint's own scheme, host and port, never elsewhere.
    fn same_origin(&self, url: &str) -> bool {
        self.origin.is_some() && origin(url) == self.origin
    }

    /// One request, tried again on a transient failure. `Ok` is any HTTP answer; redirects
    /// are not followed here.
    fn once(
        &self,
        method: &Method,
        url: &str,
        range: Option<(u64, u64)>,
        limit: u64,
        timeout: Duration,
    ) -> Result<(u16, HeaderMap, Vec<u8>), NetFailure> {
        let mut tries = 0;
        loop {
            tries += 1;
            let mut req = ureq::http::Request::builder()
                .method(method.clone())
                .uri(url);
            if let Some((a, b)) = range {
                req = req.header("Range", format!("bytes={a}-{b}"));
            }
            if let (Some(t), true) = (&self.cfg.token, self.same_origin(url)) {
                req = req.header("Authorization", t.bearer());
            }
            let req = match req.body(()) {
                Ok(r) => r,
                Err(e) => {
                    return Err(NetFailure {
                        reason: format!("bad URL {}: {e}", path_of(url)),
                    })
                }
            };
            let req = self
                .agent
                .configure_request(req)
                .timeout_global(Some(timeout))
                .build();
            match self.agent.run(req) {
                Ok(mut resp) => {
                    let status = resp.status().as_u16();
                    if transient_status(status) && tries < self.cfg.tries {
                        self.count(1, 0);
                        std::thread::sleep(self.cfg.backoff * (1 << (tries - 1)));
                        continue;
                    }
                    let headers = resp.headers().clone();
                    let mut body = Vec::new();
                    let read = if *method == Method::HEAD || (300..400).contains(&status) {
                        Ok(0)
                    } else {
                        resp.body_mut()
                            .as_reader()
                            .take(limit)
                            .read_to_end(&mut body)
                    };
                    self.count(1, body.len() as u64);
                    if let Err(e) = read {
                        return Err(NetFailure {
                            reason: format!("the answer broke off: {e}"),
                        });
                    }
                    return Ok((status, headers, body));
                }
                Err(e) => {
                    self.count(1, 0);
                    if transient_net(&e) && tries < self.cfg.tries {
                        std::thread::sleep(self.cfg.backoff * (1 << (tries - 1)));
                        continue;
                    }
                    return Err(NetFailure {
                        reason: reason(&e, timeout),
                    });
                }
            }
        }
    }

    /// A request with redirects followed: relative ones (a renamed repo) with the token,
    /// those to another host (a CDN) without it; `range` is sent on every hop. With
    /// `cross_host` false, a redirect to another host is not followed (metadata requests
    /// read what they need from the endpoint's own answer, as huggingface_hub does).
    pub fn fetch(
        &self,
        method: Method,
        url: &str,
        range: Option<(u64, u64)>,
        limit: u64,
        cross_host: bool,
        metadata: bool,
    ) -> Result<Answer, NetFailure> {
        let timeout = if metadata {
            self.cfg.metadata_timeout
        } else {
            self.cfg.download_timeout
        };
        let mut url = url.to_string();
        let mut hub_headers: Option<HeaderMap> = None;
        for _ in 0..=MAX_HOPS {
            let (status, headers, body) = self.once(&method, &url, range, limit, timeout)?;
            let location = headers
                .get("location")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            match (status, location) {
                (301 | 302 | 303 | 307 | 308, Some(loc)) => {
                    let next = if loc.starts_with('/') {
                        match &self.origin_of(&url) {
                            Some(o) => format!("{o}{loc}"),
                            None => {
                                return Err(NetFailure {
                                    reason: format!("bad redirect from {}", path_of(&url)),
                                })
                            }
                        }
                    } else if loc.starts_with("https://") || loc.starts_with("http://") {
                        loc
                    } else {
                        return Err(NetFailure {
                            reason: format!("redirect to `{}` is not a URL", path_of(&loc)),
                        });
                    };
                    if origin(&next) != origin(&url) {
                        if !cross_host {
                            return Ok(Answer {
                                status,
                                hub_headers: headers.clone(),
                                headers,
                                body,
                                url,
                            });
                        }
                        // Leaving the endpoint: keep what it said about the file.
                        if hub_headers.is_none() {
                            hub_headers = Some(headers);
                        }
                    }
                    url = next;
                }
                _ => {
                    return Ok(Answer {
                        status,
                        hub_headers: hub_headers.unwrap_or_else(|| headers.clone()),
                        headers,
                        body,
                        url,
                    })
                }
            }
        }
        Err(NetFailure {
            reason: format!("more than {MAX_HOPS} redirects"),
        })
    }

    fn origin_of(&self, url: &str) -> Option<String> {
        let (scheme, host, port) = origin(url)?;
        let default = if scheme == "https" { 443 } else { 80 };
        Some(if port == default {
            format!("{scheme}://{host}")
        } else {
            format!("{scheme}://{host}:{port}")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{origin, path_of};

    #[test]
    fn origins_compare_scheme_host_and_port() {
        assert_eq!(
            origin("https://huggingface.co/a/b"),
            origin("https://HuggingFace.co:443/c")
        );
        assert_ne!(
            origin("https://huggingface.co/a"),
            origin("http://huggingface.co/a")
        );
        assert_ne!(
            origin("http://127.0.0.1:8000/a"),
            origin("http://127.0.0.2:8000/a")
        );
        assert_ne!(
            origin("http://127.0.0.1:8000/a"),
            origin("http://localhost:8000/a")
        );
        assert_eq!(path_of("https://cdn.example/x/y?X-Amz-Signature=s"), "/x/y");
    }
}
