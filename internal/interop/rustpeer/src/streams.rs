//! Stream commands of the peer: anchors this node owns (their reader tasks
//! log what arrives) and producer jobs that attach to anchors of the other
//! node. Items are MessagePack binaries (serde_bytes::ByteBuf), the Go
//! side's []byte items.
//!
//! Commands (one JSON line each, answered with {"cmd","ok","detail"}):
//!   anchor_new    {id, mpsc?, hb_ms?}        -> detail: the handle (decimal u128)
//!   anchor_wait   {id, n, timeout_ms?}       -> detail: JSON array of the log once it
//!                                               has n entries or has ended ("end")
//!   anchor_cancel {id}                       -> the consumer cancels the stream
//!   produce       {job, handle, n, prefix?, end, idle_ms?, mpsc?}
//!                                             -> starts a producer job at once
//!   job_wait      {job, timeout_ms?}         -> detail: the job's report
//!   raw_attach    {handle, keys}             -> sends one _anchor_attach offering `keys`
//!                                               and answers with the decoded response
//!                                               (nothing connects afterwards)
//!   register_peer {peer_info}                -> registers one more peer (a second Go node)
//! `end` is one of finalize, detach, drop, await_cancel. produce also takes
//! `pad` (bytes of 'x' appended to each item) and `soft_error` (a message
//! sent with send_err after the items).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, bail};
use futures::StreamExt;
use serde_bytes::ByteBuf;
use serde_json::Value;
use velo::streaming::{AnchorConfig, MpscAnchorConfig, MpscFrame, MpscStreamController};
use velo::streaming::control::{AnchorAttachRequest, AnchorAttachResponse, StreamCancelHandle};
use velo::{InstanceId, StreamAnchorHandle, StreamController, StreamError, StreamFrame, Velo};

pub type Log = Arc<Mutex<Vec<String>>>;

enum Ctl {
    Spsc(StreamController),
    Mpsc(MpscStreamController),
    None,
}

/// Registers the log of an anchor made elsewhere (typed.rs), for anchor_wait.
pub fn add_log(id: &str, log: Log) {
    state().anchors.lock().unwrap().insert(id.to_string(), Slot { log, ctl: Ctl::None });
}

struct Slot {
    log: Log,
    ctl: Ctl,
}

#[derive(Default)]
struct State {
    anchors: Mutex<HashMap<String, Slot>>,
    jobs: Mutex<HashMap<String, tokio::task::JoinHandle<Result<String>>>>,
}

fn state() -> &'static State {
    static S: OnceLock<State> = OnceLock::new();
    S.get_or_init(State::default)
}

fn s<'a>(v: &'a Value, k: &str) -> Result<&'a str> {
    v.get(k)
        .and_then(|x| x.as_str())
        .ok_or_else(|| anyhow!("missing string field {k:?}"))
}

fn u(v: &Value, k: &str) -> Option<u64> {
    v.get(k).and_then(|x| x.as_u64())
}

fn b(v: &Value, k: &str) -> bool {
    v.get(k).and_then(|x| x.as_bool()).unwrap_or(false)
}

/// An item as logged: its text, or for a long one its first 16 bytes and
/// its length.
fn text(x: &ByteBuf) -> String {
    if x.len() > 64 {
        return format!("{}...({} bytes)", String::from_utf8_lossy(&x[..16]), x.len());
    }
    String::from_utf8_lossy(x).into_owned()
}

fn push(log: &Log, e: String) {
    log.lock().unwrap().push(e);
}

pub fn is_stream_cmd(cmd: &str) -> bool {
    matches!(
        cmd,
        "anchor_new" | "anchor_wait" | "anchor_cancel" | "produce" | "job_wait" | "raw_attach" | "register_peer"
    )
}

pub async fn run(velo: &Arc<Velo>, target: InstanceId, cmd: &str, v: &Value) -> Result<String> {
    match cmd {
        "raw_attach" => raw_attach(velo, target, v).await,
        "register_peer" => {
            let pv = v.get("peer_info").cloned().ok_or_else(|| anyhow!("missing peer_info"))?;
            let pi: velo::PeerInfo = serde_json::from_value(pv).context("deserializing PeerInfo")?;
            velo.register_peer(pi)?;
            Ok(String::new())
        }
        "anchor_new" => anchor_new(velo, v),
        "anchor_wait" => anchor_wait(v).await,
        "anchor_cancel" => {
            let id = s(v, "id")?;
            let g = state().anchors.lock().unwrap();
            let slot = g.get(id).ok_or_else(|| anyhow!("no anchor {id:?}"))?;
            match &slot.ctl {
                Ctl::Spsc(c) => c.cancel(),
                Ctl::Mpsc(c) => c.cancel(),
                Ctl::None => bail!("anchor {id:?} cannot be cancelled"),
            }
            Ok(String::new())
        }
        "produce" => {
            let job = s(v, "job")?.to_string();
            let velo = velo.clone();
            let v = v.clone();
            let h = tokio::spawn(async move { produce(velo, v).await });
            state().jobs.lock().unwrap().insert(job, h);
            Ok(String::new())
        }
        "job_wait" => {
            let job = s(v, "job")?;
            let h = state()
                .jobs
                .lock()
                .unwrap()
                .remove(job)
                .ok_or_else(|| anyhow!("no job {job:?}"))?;
            let t = Duration::from_millis(u(v, "timeout_ms").unwrap_or(15000));
            match tokio::time::timeout(t, h).await {
                Ok(r) => r.context("job panicked")?,
                Err(_) => bail!("job {job:?} still running after {t:?}"),
            }
        }
        other => bail!("unknown stream cmd {other:?}"),
    }
}

fn anchor_new(velo: &Arc<Velo>, v: &Value) -> Result<String> {
    let id = s(v, "id")?.to_string();
    let hb = u(v, "hb_ms").map(Duration::from_millis);
    let log: Log = Arc::new(Mutex::new(Vec::new()));
    let l = log.clone();
    let (handle, ctl) = if b(v, "mpsc") {
        let cfg = MpscAnchorConfig {
            heartbeat_interval: hb,
            ..Default::default()
        };
        let mut a = velo.create_mpsc_anchor_with_config::<ByteBuf>(cfg);
        let handle = a.handle();
        let ctl = Ctl::Mpsc(a.controller());
        tokio::spawn(async move {
            while let Some(f) = a.next().await {
                let e = match f {
                    Ok((sid, MpscFrame::Item(x))) => format!("s{}:item:{}", sid.0, text(&x)),
                    Ok((sid, MpscFrame::SenderError(m))) => format!("s{}:sender_error:{m}", sid.0),
                    Ok((sid, MpscFrame::Detached)) => format!("s{}:detached", sid.0),
                    Ok((sid, MpscFrame::Dropped(r))) => format!("s{}:dropped:{}", sid.0, r.unwrap_or_default()),
                    Err(e) => format!("error:{e}"),
                };
                push(&l, e);
            }
            push(&l, "end".into());
        });
        (handle, ctl)
    } else {
        let cfg = AnchorConfig {
            heartbeat_interval: hb,
            ..Default::default()
        };
        let mut a = velo
            .anchor_manager()
            .create_anchor_with_config::<ByteBuf>(cfg);
        let handle = a.handle();
        let ctl = Ctl::Spsc(a.controller());
        tokio::spawn(async move {
            while let Some(f) = a.next().await {
                let e = match f {
                    Ok(StreamFrame::Item(x)) => format!("item:{}", text(&x)),
                    Ok(StreamFrame::Finalized) => "finalized".into(),
                    Ok(StreamFrame::Detached) => "detached".into(),
                    Ok(other) => format!("frame:{other:?}"),
                    Err(StreamError::SenderDropped) => "dropped".into(),
                    Err(StreamError::SenderError(m)) => format!("sender_error:{m}"),
                    Err(e) => format!("error:{e}"),
                };
                push(&l, e);
            }
            push(&l, "end".into());
        });
        (handle, ctl)
    };
    state().anchors.lock().unwrap().insert(id, Slot { log, ctl });
    Ok(handle.as_u128().to_string())
}

async fn anchor_wait(v: &Value) -> Result<String> {
    let id = s(v, "id")?;
    let n = u(v, "n").unwrap_or(u64::MAX) as usize;
    let log = state()
        .anchors
        .lock()
        .unwrap()
        .get(id)
        .map(|x| x.log.clone())
        .ok_or_else(|| anyhow!("no anchor {id:?}"))?;
    let deadline =
        tokio::time::Instant::now() + Duration::from_millis(u(v, "timeout_ms").unwrap_or(10000));
    loop {
        {
            let g = log.lock().unwrap();
            let ended = g.last().is_some_and(|x| x == "end");
            if g.len() >= n || ended || tokio::time::Instant::now() >= deadline {
                return Ok(serde_json::to_string(&*g)?);
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn produce(velo: Arc<Velo>, v: Value) -> Result<String> {
    let raw: u128 = s(&v, "handle")?.trim().parse().context("handle")?;
    let handle = StreamAnchorHandle::from_u128(raw);
    let n = u(&v, "n").unwrap_or(0);
    let prefix = v.get("prefix").and_then(|x| x.as_str()).unwrap_or("rs-").to_string();
    let end = s(&v, "end")?.to_string();
    let idle = Duration::from_millis(u(&v, "idle_ms").unwrap_or(0));
    let pad = u(&v, "pad").unwrap_or(0) as usize;
    let soft = v.get("soft_error").and_then(|x| x.as_str()).map(String::from);
    let item = |i: u64| {
        let mut b = format!("{prefix}{i}").into_bytes();
        b.resize(b.len() + pad, b'x');
        ByteBuf::from(b)
    };
    let mut report = Vec::new();
    if b(&v, "mpsc") {
        let tx = tokio::time::timeout(Duration::from_secs(5), velo.attach_mpsc_anchor::<ByteBuf>(handle))
            .await
            .map_err(|_| anyhow!("mpsc attach timed out"))?
            .map_err(|e| anyhow!("mpsc attach: {e}"))?;
        report.push(format!("sender_id={}", tx.sender_id().0));
        for i in 0..n {
            tx.send(item(i)).await.map_err(|e| anyhow!("send {i}: {e}"))?;
        }
        report.push(format!("sent={n}"));
        if let Some(m) = &soft {
            tx.send_err(m).await.map_err(|e| anyhow!("send_err: {e}"))?;
        }
        tokio::time::sleep(idle).await;
        match end.as_str() {
            "detach" | "finalize" => {
                tx.detach().await.map_err(|e| anyhow!("detach: {e}"))?;
                report.push("detached".into());
            }
            "drop" => {
                drop(tx);
                report.push("dropped".into());
            }
            "await_cancel" => {
                let tk = tx.cancellation_token();
                let fired = tokio::time::timeout(Duration::from_secs(10), tk.cancelled()).await.is_ok();
                report.push(format!("cancel_token_fired={fired}"));
                let r = tx.send(item(n)).await;
                report.push(format!("send_after={}", match r { Ok(()) => "ok".into(), Err(e) => format!("err:{e}") }));
            }
            other => bail!("bad end {other:?}"),
        }
        return Ok(report.join(";"));
    }
    let tx = tokio::time::timeout(Duration::from_secs(5), velo.attach_anchor::<ByteBuf>(handle))
        .await
        .map_err(|_| anyhow!("attach timed out"))?
        .map_err(|e| anyhow!("attach: {e}"))?;
    report.push(format!(
        "transport={}",
        tx.negotiated_transport().map(|k| k.as_str().to_string()).unwrap_or_default()
    ));
    for i in 0..n {
        tx.send(item(i)).await.map_err(|e| anyhow!("send {i}: {e}"))?;
    }
    report.push(format!("sent={n}"));
    if let Some(m) = &soft {
        tx.send_err(m).await.map_err(|e| anyhow!("send_err: {e}"))?;
    }
    tokio::time::sleep(idle).await;
    match end.as_str() {
        "finalize" => {
            tx.finalize().map_err(|e| anyhow!("finalize: {e}"))?;
            report.push("finalized".into());
        }
        "detach" => {
            tx.detach().map_err(|e| anyhow!("detach: {e}"))?;
            report.push("detached".into());
        }
        "drop" => {
            drop(tx);
            report.push("dropped".into());
        }
        "await_cancel" => {
            let tk = tx.cancellation_token();
            let fired = tokio::time::timeout(Duration::from_secs(10), tk.cancelled()).await.is_ok();
            report.push(format!("cancel_token_fired={fired}"));
            let r = tx.send(item(n)).await;
            report.push(format!("send_after={}", match r { Ok(()) => "ok".into(), Err(e) => format!("err:{e}") }));
        }
        other => bail!("bad end {other:?}"),
    }
    Ok(report.join(";"))
}

/// One _anchor_attach request offering exactly the given transport keys, as
/// the reference's attach_remote builds it (JSON body), to see what the
/// other node answers. No connection follows.
async fn raw_attach(velo: &Arc<Velo>, target: InstanceId, v: &Value) -> Result<String> {
    let raw: u128 = s(v, "handle")?.trim().parse().context("handle")?;
    let offered: Vec<String> = v
        .get("keys")
        .and_then(|x| x.as_array())
        .map(|a| a.iter().filter_map(|k| k.as_str().map(String::from)).collect())
        .unwrap_or_default();
    let req = AnchorAttachRequest {
        handle: StreamAnchorHandle::from_u128(raw),
        session_id: 77,
        stream_cancel_handle: StreamCancelHandle::pack(velo.instance_id().worker_id(), 77),
        supported_transport_keys: offered.iter().map(|k| k.as_str().into()).collect(),
    };
    let body = serde_json::to_vec(&req)?;
    let fut = velo
        .messenger()
        .unary_streaming("_anchor_attach")
        .raw_payload(bytes::Bytes::from(body))
        .instance(target)
        .send();
    let resp = tokio::time::timeout(Duration::from_secs(5), fut)
        .await
        .map_err(|_| anyhow!("raw_attach timed out"))??;
    let parsed: AnchorAttachResponse = serde_json::from_slice(&resp)
        .with_context(|| format!("decoding {:?}", String::from_utf8_lossy(&resp)))?;
    Ok(format!("{parsed:?}"))
}
