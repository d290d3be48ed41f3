//! Finding and checking the cluster, the way kubectl does, with one clear
//! line for each way it can go wrong.
//!
//! Which configuration is used (controller-runtime's order):
//! 1. `--kubeconfig PATH`;
//! 2. `$KUBECONFIG`: a list of files, merged, the first to set a value wins;
//!    as with kubectl, files that do not exist are skipped (one that exists
//!    but cannot be read or parsed is an error naming that file);
//! 3. in a pod (`KUBERNETES_SERVICE_HOST` set, `$KUBECONFIG` unset): the pod's
//!    service account, if it loads;
//! 4. `~/.kube/config` (also when every `$KUBECONFIG` file is missing, as
//!    controller-runtime appends it to that list).
//!
//! `--context` picks a context of the kubeconfig; without it, its
//! current-context.
//!
//! Nothing here waits forever: every request is bounded by [`READ_TIMEOUT`]
//! (no answer at all for that long abandons it), and the start-up checks by
//! [`STARTUP_TIMEOUT`], so a server that accepts connections and never
//! answers is a clear error within seconds, not a hang.

use std::error::Error as StdError;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::pod::ApiPod;
use kube::api::ListParams;
use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};
use kube::runtime::watcher;
use kube::{Api, Client, Config};

/// How long any request may go without a byte from the server before it is
/// abandoned: a LIST, the request that opens a watch, or an open watch. kube
/// sets no read timeout, and a path that accepts and then drops everything (a
/// stuck proxy or load balancer) would otherwise leave the logger deaf with
/// green probes. An open watch is never silent that long on a healthy
/// connection: the server closes it after informer::WATCH_TIMEOUT_SECS (50 s)
/// with a bookmark just before, and the watcher re-opens it.
pub const READ_TIMEOUT: Duration = Duration::from_secs(54);

/// The bound on each start-up check (GET /version, the selector check), so
/// that a server that never answers is reported within 10 s (20 s with a
/// selector to check). Also kube's connect timeout (TCP and TLS handshake)
/// for every request.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);

/// One line for a watch error, with the server's own reason and a hint where
/// we know the fix. Every text in it that came from the server or a proxy (a
/// Status's message and reason, an error page, an error's chain) is cleaned
/// and cut first (text.rs): an HTML page or an escape sequence in an error
/// body never reaches a WARN line as it is.
pub fn describe(error: &watcher::Error) -> String {
    let (doing, error) = match error {
        watcher::Error::InitialListFailed(e) => ("listing pods", e),
        watcher::Error::WatchStartFailed(e) => ("starting the watch", e),
        watcher::Error::WatchFailed(e) => ("watching", e),
        watcher::Error::WatchError(status) => {
            return format!(
                "the watch was closed by the server: {} ({}, {})",
                message(&status.message),
                word(&status.reason),
                status.code
            );
        }
        watcher::Error::NoResourceVersion => return error.to_string(),
    };
    match error {
        kube::Error::Api(status) if status.code == 403 => format!(
            "{doing} is forbidden: {} (grant list and watch on pods to this identity: see demo-controller.yaml)",
            message(&status.message)
        ),
        kube::Error::Api(status) => {
            format!("{doing} failed: {} ({}, {})", message(&status.message), word(&status.reason), status.code)
        }
        other if timed_out(other) => format!(
            "{doing} failed: the API server did not answer in time (connect timeout {}s, read timeout {}s): the request is abandoned",
            STARTUP_TIMEOUT.as_secs(),
            READ_TIMEOUT.as_secs()
        ),
        other => {
            format!("{doing} failed: {}", crate::text::cleaned(&chain(other), 2 * crate::text::MESSAGE_CHARS))
        }
    }
}

/// A message from the server or a proxy, fit for one line.
fn message(text: &str) -> std::borrow::Cow<'_, str> {
    crate::text::cleaned(text.trim(), crate::text::MESSAGE_CHARS)
}

/// A reason (`NotFound`, `Forbidden`), fit for one line.
fn word(text: &str) -> std::borrow::Cow<'_, str> {
    crate::text::cleaned(text, crate::text::WORD_CHARS)
}

/// Whether an error is our connect or read timeout firing (somewhere in its
/// chain; layers of hyper and io errors wrap it).
pub fn timed_out(error: &(dyn StdError + 'static)) -> bool {
    let mut next: Option<&(dyn StdError + 'static)> = Some(error);
    while let Some(e) = next {
        if e.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut) {
            return true;
        }
        next = e.source();
    }
    let text = chain(error);
    text.contains("timed out") || text.contains("TimedOut")
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(
        "no kubeconfig found ($KUBECONFIG is unset and {0} does not exist) and not running in a pod: pass --kubeconfig PATH, or run `make demo` for a local cluster"
    )]
    NoConfig(String),
    #[error(
        "no kubeconfig found (no file named in $KUBECONFIG exists, nor {0}): pass --kubeconfig PATH or fix $KUBECONFIG"
    )]
    NoConfigInList(String),
    #[error(
        "KUBERNETES_SERVICE_HOST is set but the in-cluster config does not load ({reason}), and {home} does not exist: mount the pod's service-account token (automountServiceAccountToken), or pass --kubeconfig PATH"
    )]
    NoConfigInPod { home: String, reason: String },
    #[error("cannot read kubeconfig {path}: {reason}: pass an existing file with --kubeconfig or fix $KUBECONFIG")]
    ReadKubeconfig { path: String, reason: String },
    #[error("kubeconfig {path} is not a valid kubeconfig: {reason}")]
    ParseKubeconfig { path: String, reason: String },
    #[error("context \"{name}\" not found in the kubeconfig (available: {available}): pass one of them with --context")]
    UnknownContext { name: String, available: String },
    #[error("the kubeconfig has no current-context: pass --context NAME")]
    NoCurrentContext,
    #[error("unusable kubeconfig: {0}")]
    BadKubeconfig(String),
    #[error("--context needs a kubeconfig, but the in-cluster config is in use: pass --kubeconfig too")]
    ContextInCluster,
    #[error("cannot load the in-cluster config: {0}")]
    InCluster(String),
    #[error("cannot reach the Kubernetes API server at {url}: {reason}{hint}")]
    Unreachable { url: String, reason: String, hint: &'static str },
    #[error(
        "the API server at {url} rejected our credentials (401 Unauthorized): the token or client certificate is invalid or expired; refresh the credentials in your kubeconfig"
    )]
    Unauthorized { url: String },
    #[error(
        "the API server at {url} refuses anonymous requests (401 Unauthorized) and the kubeconfig's user has no credentials: give it a token or a client certificate"
    )]
    NoCredentials { url: String },
    #[error(
        "the API server at {url} forbids GET /version to this identity (403 Forbidden: {message}): check the user in your kubeconfig, or grant it the system:public-info-viewer role"
    )]
    Forbidden { url: String, message: String },
    #[error("the server at {url} is not a Kubernetes API server: {reason}")]
    NotKubernetes { url: String, reason: String },
    #[error(
        "cannot reach the Kubernetes API server: checking --selector got no answer within {0}s, though GET /version was answered (is the server overloaded, or a proxy in the way?)"
    )]
    SelectorCheckTimedOut(u64),
    #[error("invalid --selector '{selector}': {reason}")]
    BadSelector { selector: String, reason: String },
}

/// Loads the configuration and proves the server is there and is Kubernetes,
/// so that a wrong address or credential fails at once with a reason instead
/// of a watch that retries forever.
pub async fn connect(kubeconfig: Option<PathBuf>, context: Option<String>) -> Result<Client, ClientError> {
    let mut config = load(kubeconfig, context).await?;
    let url = config.cluster_url.to_string();
    config.read_timeout = Some(READ_TIMEOUT);
    // Count the read timeout from when a request is sent, not from when its
    // pooled connection went idle.
    config.reset_reader_on_write = true;
    config.connect_timeout = Some(STARTUP_TIMEOUT);
    // A 401 means "bad credentials" only if there were any.
    let a = &config.auth_info;
    let anonymous = a.token.is_none()
        && a.token_file.is_none()
        && a.username.is_none()
        && a.client_certificate.is_none()
        && a.client_certificate_data.is_none()
        && a.exec.is_none()
        && a.auth_provider.is_none();
    let client = Client::try_from(config).map_err(|e| ClientError::BadKubeconfig(chain(&e)))?;
    let Ok(answer) = tokio::time::timeout(STARTUP_TIMEOUT, client.apiserver_version()).await else {
        return Err(no_answer(url));
    };
    match answer {
        Ok(_) => Ok(client),
        Err(kube::Error::Api(status)) if status.code == 401 && anonymous => Err(ClientError::NoCredentials { url }),
        Err(kube::Error::Api(status)) if status.code == 401 => Err(ClientError::Unauthorized { url }),
        Err(kube::Error::Api(status)) if status.code == 403 => {
            Err(ClientError::Forbidden { url, message: message(&status.message).into_owned() })
        }
        Err(kube::Error::Api(status)) if status.code == 404 => Err(ClientError::NotKubernetes {
            url,
            reason: "GET /version answered 404 Not Found (is the URL the API server's root, without a path?)".into(),
        }),
        Err(kube::Error::Api(status)) => Err(ClientError::NotKubernetes {
            url,
            reason: format!("GET /version answered {} {}", status.code, message(&status.message)),
        }),
        Err(e @ kube::Error::SerdeError(_)) => {
            Err(ClientError::NotKubernetes { url, reason: message(&chain(&e)).into_owned() })
        }
        Err(e) if timed_out(&e) => Err(no_answer(url)),
        Err(e) => {
            let reason = chain(&e);
            let hint = hint(&reason);
            Err(ClientError::Unreachable { url, reason, hint })
        }
    }
}

fn no_answer(url: String) -> ClientError {
    ClientError::Unreachable {
        url,
        reason: format!("no answer within {}s", STARTUP_TIMEOUT.as_secs()),
        hint: " (something accepts connections there but does not answer: a stopped API server, a proxy or a firewall?)",
    }
}

/// Lets the API server parse the label selector (it owns the grammar). A 403
/// is not fatal here: permissions can be granted while we wait.
pub async fn check_selector(api: &Api<ApiPod>, selector: &str) -> Result<(), ClientError> {
    let params = ListParams::default().labels(selector).limit(1);
    match tokio::time::timeout(STARTUP_TIMEOUT, api.list_metadata(&params)).await {
        Err(_) => Err(ClientError::SelectorCheckTimedOut(STARTUP_TIMEOUT.as_secs())),
        Ok(Err(kube::Error::Api(status))) if status.code == 400 => {
            Err(ClientError::BadSelector { selector: selector.to_string(), reason: status.message.clone() })
        }
        Ok(_) => Ok(()),
    }
}

async fn load(path: Option<PathBuf>, context: Option<String>) -> Result<Config, ClientError> {
    let options = KubeConfigOptions { context: context.clone(), ..Default::default() };
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default().join(".kube").join("config");
    let (kubeconfig, source) = if let Some(path) = path {
        (read(&path)?, path.display().to_string())
    } else if let Some(list) = std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()) {
        match read_list(&list)? {
            Some(found) => found,
            None if home.exists() => (read(&home)?, home.display().to_string()),
            None => return Err(ClientError::NoConfigInList(home.display().to_string())),
        }
    } else if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() {
        if context.is_some() {
            return Err(ClientError::ContextInCluster);
        }
        match Config::incluster() {
            Ok(config) => return Ok(config),
            // controller-runtime falls back to the home kubeconfig.
            Err(_) if home.exists() => (read(&home)?, home.display().to_string()),
            Err(e) => {
                return Err(ClientError::NoConfigInPod { home: home.display().to_string(), reason: chain(&e) });
            }
        }
    } else {
        if !home.exists() {
            return Err(ClientError::NoConfig(home.display().to_string()));
        }
        (read(&home)?, home.display().to_string())
    };
    if let Some(name) = &context {
        if !kubeconfig.contexts.iter().any(|c| &c.name == name) {
            let names: Vec<&str> = kubeconfig.contexts.iter().map(|c| c.name.as_str()).collect();
            let available = if names.is_empty() { "none".to_string() } else { names.join(", ") };
            return Err(ClientError::UnknownContext { name: name.clone(), available });
        }
    } else if kubeconfig.current_context.as_deref().unwrap_or_default().is_empty() {
        return Err(ClientError::NoCurrentContext);
    }
    Config::from_custom_kubeconfig(kubeconfig, &options).await.map_err(|e| kubeconfig_error(e, &source))
}

/// The files of a `$KUBECONFIG` list that exist, merged in order (kubectl's
/// rule: the first file to set a value wins), with the list of those used;
/// `None` when none exists. An error names the one file at fault.
fn read_list(list: &std::ffi::OsStr) -> Result<Option<(Kubeconfig, String)>, ClientError> {
    let mut merged: Option<Kubeconfig> = None;
    let mut used = Vec::new();
    for path in std::env::split_paths(list).filter(|p| !p.as_os_str().is_empty()) {
        if !path.exists() {
            continue; // kubectl skips files that do not exist
        }
        let next = read(&path)?;
        let source = path.display().to_string();
        merged = Some(match merged {
            None => next,
            Some(before) => before.merge(next).map_err(|e| kubeconfig_error(e, &source))?,
        });
        used.push(source);
    }
    Ok(merged.map(|kubeconfig| (kubeconfig, used.join(":"))))
}

fn read(path: &Path) -> Result<Kubeconfig, ClientError> {
    Kubeconfig::read_from(path).map_err(|e| kubeconfig_error(e, &path.display().to_string()))
}

fn kubeconfig_error(error: KubeconfigError, path: &str) -> ClientError {
    let path = path.to_string();
    match error {
        KubeconfigError::ReadConfig(io, _) => ClientError::ReadKubeconfig { path, reason: io.to_string() },
        KubeconfigError::Parse(_) => ClientError::ParseKubeconfig { path, reason: chain(&error) },
        other => ClientError::BadKubeconfig(chain(&other)),
    }
}

/// What to try, judged from the low-level reason.
fn hint(reason: &str) -> &'static str {
    if reason.contains("certificate") || reason.contains("UnknownIssuer") {
        " (the server's certificate is not signed by the CA in your kubeconfig: check certificate-authority-data)"
    } else if reason.contains("InvalidContentType") || reason.contains("corrupt message") {
        " (it does not speak TLS: is this the address of a Kubernetes API server?)"
    } else if reason.contains("refused") {
        " (nothing listens there: is the cluster running? Without one, `make demo` starts a local one)"
    } else {
        ""
    }
}

/// An error and its sources on one line, without the repetition that nested
/// error messages often carry, nor the multi-line excerpts some parsers add.
pub fn chain(error: &dyn StdError) -> String {
    let first_line = |e: &dyn StdError| e.to_string().lines().next().unwrap_or_default().to_string();
    let mut line = first_line(error);
    let mut source = error.source();
    while let Some(e) = source {
        let text = first_line(e);
        if !line.contains(&text) {
            line = format!("{line}: {text}");
        }
        source = e.source();
    }
    line
}
