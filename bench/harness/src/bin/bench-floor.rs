//! The floors of `make bench`: bare clients that do only the unavoidable part
//! of a logger's work, so every logger can be given as a multiple of what is
//! physically possible on the same machine and server.
//!
//! - `list`: reads every pod with paged LISTs (500 per page, as kube and
//!   client-go page) and throws the bytes away once it has found the next
//!   page's token. The sync-time floor for a paged LIST.
//! - `stream`: the streaming list (`watch` with `sendInitialEvents=true`),
//!   read to the `k8s.io/initial-events-end` bookmark and thrown away. The
//!   sync-time floor for a streaming list.
//! - `list-protobuf`, `stream-protobuf`: the same two in protobuf, the API
//!   server's own format: of each page only the next page's token and the
//!   number of pods are decoded, of each frame only the event's type. The
//!   floors for a client that reads protobuf (demo-controller by default,
//!   client-go), so each sync time is read against the floor of its own wire.
//! - `watch`: a watch from "now" that prints `onAdd: namespace/name` for each
//!   ADDED event as it arrives and parses nothing else. The lag floor: run
//!   beside a logger during a burst, it says when each event reached *a*
//!   client.
//!
//! `list` and `stream` print `cache synced pods=N elapsed_ms=M` when done,
//! `watch` prints it once its watch is open; then each waits for SIGTERM or
//! Ctrl-C, so the harness can read its memory and CPU.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use clap::{Parser, ValueEnum};
use futures::io::AsyncBufReadExt;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde::Deserialize;
use serde::de::IgnoredAny;

#[derive(Parser, Debug)]
#[command(about = "Bare pod clients that measure the floors for make bench")]
struct Opts {
    /// What to do: list, stream, list-protobuf, stream-protobuf or watch
    #[arg(value_enum)]
    mode: Mode,
    /// Path to a kubeconfig
    #[arg(long)]
    kubeconfig: PathBuf,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Mode {
    List,
    Stream,
    ListProtobuf,
    StreamProtobuf,
    Watch,
}

type Error = Box<dyn std::error::Error>;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let opts = Opts::parse();
    let start = Instant::now();
    let kubeconfig = Kubeconfig::read_from(&opts.kubeconfig)?;
    let client = Client::try_from(Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?)?;
    match opts.mode {
        Mode::List => {
            let pods = list(&client).await?;
            println!("cache synced pods={pods} elapsed_ms={}", start.elapsed().as_millis());
        }
        Mode::Stream => {
            let pods = stream(&client).await?;
            println!("cache synced pods={pods} elapsed_ms={}", start.elapsed().as_millis());
        }
        Mode::ListProtobuf => {
            let pods = list_protobuf(&client).await?;
            println!("cache synced pods={pods} elapsed_ms={}", start.elapsed().as_millis());
        }
        Mode::StreamProtobuf => {
            let pods = stream_protobuf(&client).await?;
            println!("cache synced pods={pods} elapsed_ms={}", start.elapsed().as_millis());
        }
        Mode::Watch => {
            tokio::select! {
                result = watch(&client, start) => result?,
                _ = tokio::signal::ctrl_c() => {}
            }
            return Ok(());
        }
    }
    tokio::signal::ctrl_c().await?;
    Ok(())
}

/// A page of a LIST with nothing but its length and the next page's token.
#[derive(Deserialize)]
struct Page {
    metadata: PageMeta,
    items: Vec<IgnoredAny>,
}

#[derive(Deserialize)]
struct PageMeta {
    #[serde(rename = "continue")]
    next: Option<String>,
    #[serde(rename = "resourceVersion")]
    resource_version: Option<String>,
}

/// A page of the LIST of every pod: 500 a page, as kube and client-go page.
fn page_uri(next: Option<&str>) -> String {
    match next {
        Some(token) => format!("/api/v1/pods?limit=500&continue={token}"),
        None => "/api/v1/pods?limit=500".to_string(),
    }
}

async fn list(client: &Client) -> Result<usize, Error> {
    let mut pods = 0;
    let mut next: Option<String> = None;
    loop {
        let uri = page_uri(next.as_deref());
        let text = client.request_text(http::Request::get(uri).body(Vec::new())?).await?;
        let page: Page = serde_json::from_str(&text)?;
        pods += page.items.len();
        match page.metadata.next.filter(|t| !t.is_empty()) {
            Some(token) => next = Some(token),
            None => return Ok(pods),
        }
    }
}

async fn stream(client: &Client) -> Result<usize, Error> {
    // The request kube's `streaming_lists()` sends.
    let uri = "/api/v1/pods?watch=true&sendInitialEvents=true&allowWatchBookmarks=true\
               &resourceVersionMatch=NotOlderThan&resourceVersion=0";
    let mut body = std::pin::pin!(client.request_stream(http::Request::get(uri).body(Vec::new())?).await?);
    let (mut line, mut pods) = (String::new(), 0);
    loop {
        line.clear();
        if body.read_line(&mut line).await? == 0 {
            return Err("the stream ended before the initial-events-end bookmark".into());
        }
        if line.starts_with(r#"{"type":"ADDED""#) {
            pods += 1;
        } else if line.starts_with(r#"{"type":"BOOKMARK""#) && line.contains("k8s.io/initial-events-end") {
            return Ok(pods);
        } else if line.starts_with(r#"{"type":"ERROR""#) {
            return Err(format!("the server refused the streaming list: {}", line.trim()).into());
        }
    }
}

/// What both protobuf floors ask for.
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// A GET asking for protobuf: the response's body, a stream of byte chunks.
async fn get_protobuf(client: &Client, uri: &str) -> Result<kube::client::Body, Error> {
    let request = http::Request::get(uri).header(http::header::ACCEPT, PROTOBUF).body(kube::client::Body::empty())?;
    let response = client.send(request).await?;
    let content_type = response.headers().get(http::header::CONTENT_TYPE).cloned();
    if !response.status().is_success()
        || content_type.as_ref().is_none_or(|t| !t.as_bytes().starts_with(PROTOBUF.as_bytes()))
    {
        return Err(format!("{uri}: answered {} with Content-Type {content_type:?}", response.status()).into());
    }
    Ok(response.into_body())
}

/// `k8s\0` + runtime.Unknown: only its `raw` (field 2), the object's bytes.
#[derive(Clone, PartialEq, prost::Message)]
struct Unknown {
    #[prost(bytes = "bytes", optional, tag = "2")]
    raw: Option<bytes::Bytes>,
}

/// A PodList with its items left as bytes (counted, never decoded) and of
/// its ListMeta only the continue token.
#[derive(Clone, PartialEq, prost::Message)]
struct PodListPage {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ListMetaContinue>,
    #[prost(bytes = "bytes", repeated, tag = "2")]
    items: Vec<bytes::Bytes>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ListMetaContinue {
    #[prost(string, optional, tag = "3")]
    r#continue: Option<String>,
}

async fn list_protobuf(client: &Client) -> Result<usize, Error> {
    use http_body_util::BodyExt;
    use prost::Message;
    let mut pods = 0;
    let mut next: Option<String> = None;
    loop {
        let uri = page_uri(next.as_deref());
        let body = get_protobuf(client, &uri).await?.collect().await?.to_bytes();
        let unknown = Unknown::decode(body.get(4..).ok_or("an empty LIST response")?)?;
        let page = PodListPage::decode(unknown.raw.unwrap_or_default())?;
        pods += page.items.len();
        match page.metadata.and_then(|m| m.r#continue).filter(|t| !t.is_empty()) {
            Some(token) => next = Some(token),
            None => return Ok(pods),
        }
    }
}

/// A watch event, of which only the type is decoded.
#[derive(Clone, PartialEq, prost::Message)]
struct EventType {
    #[prost(string, optional, tag = "1")]
    r#type: Option<String>,
}

async fn stream_protobuf(client: &Client) -> Result<usize, Error> {
    use futures::StreamExt;
    use http_body_util::BodyExt;
    use prost::Message;
    // The request demo-controller's streaming list sends.
    let uri = "/api/v1/pods?watch=true&sendInitialEvents=true&allowWatchBookmarks=true\
               &resourceVersionMatch=NotOlderThan&resourceVersion=0";
    let mut body = get_protobuf(client, uri).await?.into_data_stream();
    let (mut buffer, mut pods) = (bytes::BytesMut::new(), 0);
    loop {
        // Every whole frame in the buffer: a 4-byte big-endian length, then a WatchEvent.
        while buffer.len() >= 4 {
            let len = u32::from_be_bytes([buffer[0], buffer[1], buffer[2], buffer[3]]) as usize;
            if buffer.len() < 4 + len {
                break;
            }
            let frame = buffer.split_to(4 + len).freeze().slice(4..);
            match EventType::decode(frame.clone())?.r#type.as_deref() {
                Some("ADDED") => pods += 1,
                Some("BOOKMARK") if frame.windows(25).any(|w| w == b"k8s.io/initial-events-end") => return Ok(pods),
                Some("ERROR") => return Err("the server refused the streaming list".into()),
                _ => {}
            }
        }
        match body.next().await {
            Some(chunk) => buffer.extend_from_slice(&chunk?),
            None => return Err("the stream ended before the initial-events-end bookmark".into()),
        }
    }
}

/// A watch event with only what the line shows, borrowed from the input.
#[derive(Deserialize)]
struct Event<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    #[serde(borrow)]
    object: Object<'a>,
}

#[derive(Deserialize)]
struct Object<'a> {
    #[serde(borrow)]
    metadata: Meta<'a>,
}

#[derive(Deserialize)]
struct Meta<'a> {
    name: Option<&'a str>,
    namespace: Option<&'a str>,
    #[serde(rename = "resourceVersion")]
    resource_version: Option<&'a str>,
}

async fn watch(client: &Client, start: Instant) -> Result<(), Error> {
    let text = client.request_text(http::Request::get("/api/v1/pods?limit=1").body(Vec::new())?).await?;
    let mut rv = serde_json::from_str::<Page>(&text)?.metadata.resource_version.unwrap_or_default();
    let mut out = std::io::stdout().lock();
    let mut line = String::new();
    // The server may end a watch at any time (a timeout, a client too slow
    // for its buffer): watch again from the last resourceVersion seen, as
    // every informer does.
    for attempt in 0.. {
        let uri = format!("/api/v1/pods?watch=true&resourceVersion={rv}");
        let mut body = std::pin::pin!(client.request_stream(http::Request::get(uri).body(Vec::new())?).await?);
        if attempt == 0 {
            writeln!(out, "cache synced pods=0 elapsed_ms={}", start.elapsed().as_millis())?;
            out.flush()?;
        }
        loop {
            line.clear();
            if body.read_line(&mut line).await? == 0 {
                break;
            }
            let event: Event = serde_json::from_str(&line)?;
            if event.kind == "ERROR" {
                return Err(format!("the watch failed: {}", line.trim()).into());
            }
            if event.kind == "ADDED" {
                let meta = &event.object.metadata;
                writeln!(out, "onAdd: {}/{}", meta.namespace.unwrap_or_default(), meta.name.unwrap_or_default())?;
                out.flush()?;
            }
            if let Some(v) = event.object.metadata.resource_version {
                rv = v.to_string();
            }
        }
    }
    Ok(())
}
