//! Typed stream items: a Rust Anchor<Token> and Sender<Token> that the Go
//! side meets with its own struct, so that both ends use serde's encoding
//! through rmp_serde and the Go codec must match it.
//!
//! Commands:
//!   typed_anchor_new {id}              -> detail: the handle; the reader task logs
//!                                         each Token as JSON, "finalized", "end",
//!                                         or "error:<message>"
//!   typed_produce    {handle, items}   -> attaches a Sender<Token>, sends the items
//!                                         (JSON Tokens), finalizes; detail: "sent=N"
//! anchor_wait reads the log of a typed anchor too.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use velo::{StreamAnchorHandle, StreamError, StreamFrame, Velo};

/// The Go test's interopToken, field for field.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct Token {
    id: u32,
    text: String,
    logprob: Option<f32>,
    alts: Vec<Vec<String>>,
    meta: BTreeMap<String, i64>,
    #[serde(with = "serde_bytes")]
    raw: Vec<u8>,
    finish: Finish,
}

#[derive(Serialize, Deserialize, Debug, Clone)]
enum Finish {
    Stop,
    Length,
}

pub fn is_typed_cmd(cmd: &str) -> bool {
    matches!(cmd, "typed_anchor_new" | "typed_produce")
}

pub async fn run(velo: &Arc<Velo>, cmd: &str, v: &Value) -> Result<String> {
    match cmd {
        "typed_anchor_new" => {
            let id = v.get("id").and_then(|x| x.as_str()).ok_or_else(|| anyhow!("missing id"))?;
            let mut a = velo.anchor_manager().create_anchor::<Token>();
            let handle = a.handle();
            let log: crate::streams::Log = Arc::new(Mutex::new(Vec::new()));
            let l = log.clone();
            tokio::spawn(async move {
                while let Some(f) = a.next().await {
                    let e = match f {
                        Ok(StreamFrame::Item(t)) => serde_json::to_string(&t).unwrap_or_default(),
                        Ok(StreamFrame::Finalized) => "finalized".into(),
                        Ok(other) => format!("frame:{other:?}"),
                        Err(StreamError::SenderDropped) => "dropped".into(),
                        Err(e) => format!("error:{e}"),
                    };
                    l.lock().unwrap().push(e);
                }
                l.lock().unwrap().push("end".into());
            });
            crate::streams::add_log(id, log);
            Ok(handle.as_u128().to_string())
        }
        "typed_produce" => {
            let raw: u128 = v
                .get("handle")
                .and_then(|x| x.as_str())
                .ok_or_else(|| anyhow!("missing handle"))?
                .trim()
                .parse()
                .context("handle")?;
            let items: Vec<Token> =
                serde_json::from_value(v.get("items").cloned().unwrap_or_default()).context("items")?;
            let tx = tokio::time::timeout(
                Duration::from_secs(5),
                velo.attach_anchor::<Token>(StreamAnchorHandle::from_u128(raw)),
            )
            .await
            .map_err(|_| anyhow!("attach timed out"))?
            .map_err(|e| anyhow!("attach: {e}"))?;
            for (i, t) in items.iter().enumerate() {
                tx.send(t.clone()).await.map_err(|e| anyhow!("send {i}: {e}"))?;
            }
            tx.finalize().map_err(|e| anyhow!("finalize: {e}"))?;
            Ok(format!("sent={}", items.len()))
        }
        other => Err(anyhow!("unknown typed cmd {other:?}")),
    }
}
