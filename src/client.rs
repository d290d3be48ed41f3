//! Finding and checking the cluster, the way kubectl does, with one clear
//! line for each way it can go wrong.
//!
//! Which configuration is used (controller-runtime's order):
//! 1. `--kubeconfig PATH`;
//! 2. `$KUBECONFIG` (a list of files, merged);
//! 3. in a pod (`KUBERNETES_SERVICE_HOST` set): the pod's service account;
//! 4. `~/.kube/config`.
//!
//! `--context` picks a context of the kubeconfig; without it, its
//! current-context.

use std::error::Error as StdError;
use std::path::PathBuf;

use crate::pod::Pod;
use kube::api::ListParams;
use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};
use kube::runtime::watcher;
use kube::{Api, Client, Config};

/// One line for a watch error, with the server's own reason and a hint where
/// we know the fix.
pub fn describe(error: &watcher::Error) -> String {
    let (doing, error) = match error {
        watcher::Error::InitialListFailed(e) => ("listing pods", e),
        watcher::Error::WatchStartFailed(e) => ("starting the watch", e),
        watcher::Error::WatchFailed(e) => ("watching", e),
        watcher::Error::WatchError(status) => {
            return format!(
                "the watch was closed by the server: {} ({}, {})",
                status.message, status.reason, status.code
            );
        }
        watcher::Error::NoResourceVersion => return error.to_string(),
    };
    match error {
        kube::Error::Api(status) if status.code == 403 => format!(
            "{doing} is forbidden: {} (grant get, list and watch on pods to this identity: see demo-controller.yaml)",
            status.message
        ),
        kube::Error::Api(status) => {
            format!("{doing} failed: {} ({}, {})", status.message, status.reason, status.code)
        }
        other => format!("{doing} failed: {}", chain(other)),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(
        "no kubeconfig found ($KUBECONFIG is unset and {0} does not exist) and not running in a pod: pass --kubeconfig PATH, or run `make demo` for a local cluster"
    )]
    NoConfig(String),
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
    #[error("the server at {url} is not a Kubernetes API server: {reason}")]
    NotKubernetes { url: String, reason: String },
    #[error("invalid --selector '{selector}': {reason}")]
    BadSelector { selector: String, reason: String },
}

/// Loads the configuration and proves the server is there and is Kubernetes,
/// so that a wrong address or credential fails at once with a reason instead
/// of a watch that retries forever.
pub async fn connect(kubeconfig: Option<PathBuf>, context: Option<String>) -> Result<Client, ClientError> {
    let config = load(kubeconfig, context).await?;
    let url = config.cluster_url.to_string();
    let client = Client::try_from(config).map_err(|e| ClientError::BadKubeconfig(chain(&e)))?;
    match client.apiserver_version().await {
        Ok(_) => Ok(client),
        Err(kube::Error::Api(status)) if status.code == 401 => Err(ClientError::Unauthorized { url }),
        Err(kube::Error::Api(status)) => Err(ClientError::NotKubernetes {
            url,
            reason: format!("GET /version answered {} {}", status.code, status.message),
        }),
        Err(e @ kube::Error::SerdeError(_)) => Err(ClientError::NotKubernetes { url, reason: chain(&e) }),
        Err(e) => {
            let reason = chain(&e);
            let hint = hint(&reason);
            Err(ClientError::Unreachable { url, reason, hint })
        }
    }
}

/// Lets the API server parse the label selector (it owns the grammar). A 403
/// is not fatal here: permissions can be granted while we wait.
pub async fn check_selector(api: &Api<Pod>, selector: &str) -> Result<(), ClientError> {
    match api.list_metadata(&ListParams::default().labels(selector).limit(1)).await {
        Err(kube::Error::Api(status)) if status.code == 400 => {
            Err(ClientError::BadSelector { selector: selector.to_string(), reason: status.message.clone() })
        }
        _ => Ok(()),
    }
}

async fn load(path: Option<PathBuf>, context: Option<String>) -> Result<Config, ClientError> {
    let options = KubeConfigOptions { context: context.clone(), ..Default::default() };
    let (kubeconfig, source) = if let Some(path) = path {
        (read(&path)?, path.display().to_string())
    } else if let Some(list) = std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()) {
        let source = list.to_string_lossy().into_owned();
        let merged = Kubeconfig::from_env().map_err(|e| kubeconfig_error(e, &source))?;
        (merged.unwrap_or_default(), source)
    } else if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() {
        if context.is_some() {
            return Err(ClientError::ContextInCluster);
        }
        return Config::incluster().map_err(|e| ClientError::InCluster(chain(&e)));
    } else {
        let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default();
        let path = home.join(".kube").join("config");
        if !path.exists() {
            return Err(ClientError::NoConfig(path.display().to_string()));
        }
        (read(&path)?, path.display().to_string())
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

fn read(path: &std::path::Path) -> Result<Kubeconfig, ClientError> {
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
