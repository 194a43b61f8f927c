//! The node process of the cluster tests: one node started from its configuration file
//! (`RSM_CONFIG`, as an operator's would be), playing exporter and importer as the parent
//! test tells it, one command line at a time. Every answer is one line; an error is
//! `err <RSMERR name> <ms>`, and no command waits longer than [`LIMIT`] (then `hang`; the
//! records workload's `work` commands, `records.rs`, four times that).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use rsm::{Access, BarrierMode, ExportFlags, ExportSegment, ImportSegment, NodeId, Perm};
use rsm::{SegmentId, SignalFlags};

use crate::common::{next_command, say};

/// The longest any command may take: past it the answer is `hang`.
const LIMIT: Duration = Duration::from_secs(15);

/// The sizes the data check moves: 1 B to 64 MiB.
pub const SIZES: [usize; 7] = [1, 7, 4096, 65_536 + 3, 1 << 20, 8 << 20, 64 << 20];

/// `common::pattern(seed, len)`, made fast for 64 MiB in a debug build: the pattern repeats
/// every 251 bytes, so it is one period copied over and over.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let period = crate::common::pattern(seed, 251);
    let mut out = Vec::with_capacity(len + 251);
    while out.len() < len {
        out.extend_from_slice(&period);
    }
    out.truncate(len);
    out
}

/// What the background writer of `stream` ended with: the error's name and when.
type Outcome = Arc<Mutex<Option<(String, Instant)>>>;

struct State {
    node: rsm::Node,
    exports: Vec<ExportSegment>,
    imports: Vec<ImportSegment>,
    events: Arc<Mutex<Vec<String>>>,
    outcome: Outcome,
    mark: Instant,
    records: Mutex<crate::records::Records>,
}

fn err_line(e: &rsm::Error, since: Instant) -> String {
    format!("err {} {}", e.name(), since.elapsed().as_millis())
}

/// `all`, or `id:mode,id:mode` (octal modes).
fn acl(text: &str) -> Vec<Access> {
    if text == "all" {
        return Vec::new();
    }
    text.split(',')
        .map(|e| {
            let (id, mode) = e.split_once(':').expect("id:mode");
            Access::new(
                NodeId(id.parse().expect("node id")),
                u32::from_str_radix(mode, 8).expect("octal mode"),
            )
        })
        .collect()
}

/// Collects a stream's events as `<label> <event>` lines.
fn collect(label: String, mut events: rsm::EventStream, into: Arc<Mutex<Vec<String>>>) {
    tokio::spawn(async move {
        while let Some(e) = events.next().await {
            let line = match e {
                Ok(e) => format!("{label} {e:?}"),
                Err(lagged) => format!("{label} {lagged:?}"),
            };
            into.lock().unwrap().push(line);
        }
    });
}

/// The data check on one import: put then get back every size, vectors, typed items and an
/// explicit barrier; `ok <seed of the last 64 MiB put>` or what went wrong.
async fn data(imp: &ImportSegment) -> String {
    for (k, &len) in SIZES.iter().enumerate() {
        let seed = k as u64 + 1;
        let off = if len < 4096 { 4096 - 3 } else { 0 };
        if let Err(e) = imp.put(off, pattern(seed, len)).await {
            return format!("fail put {len}: {}", e.error().name());
        }
        match imp.get(off, vec![0u8; len]).await {
            Ok((_, back)) if back == pattern(seed, len) => {}
            Ok(_) => return format!("fail get {len}: wrong bytes"),
            Err(e) => return format!("fail get {len}: {}", e.error().name()),
        }
    }
    // 16 pieces of 4 KiB, gathered from one buffer each, 8 KiB apart at the target.
    let pieces: Vec<Vec<u8>> = (0..16).map(|i| pattern(100 + i, 4096)).collect();
    let entries = pieces
        .iter()
        .enumerate()
        .map(|(i, p)| rsm::SgEntry::buffer(p.clone(), i as u64 * 8192))
        .collect();
    if let Err(e) = imp.putv(entries, rsm::SgFlags::empty()).await.result {
        return format!("fail putv: {}", e.name());
    }
    let entries = (0..16)
        .map(|i| rsm::SgEntry::buffer(vec![0u8; 4096], i as u64 * 8192))
        .collect();
    let out = imp.getv(entries, rsm::SgFlags::empty()).await;
    if let Err(e) = out.result {
        return format!("fail getv: {}", e.name());
    }
    for (i, e) in out.entries.unwrap_or_default().into_iter().enumerate() {
        if e.into_buffer().as_deref() != Some(&pieces[i][..]) {
            return format!("fail getv: entry {i} differs");
        }
    }
    // Typed items, in the exporter's byte order.
    let words = [0x0102_0304_0506_0708u64, u64::MAX, 7];
    let typed = async {
        imp.put64(64, &words).await?;
        let w = imp.get64(64, 3).await?;
        imp.put32(128, &[0xdead_beef, 1]).await?;
        let v = imp.get32(128, 2).await?;
        imp.put16(136, &[0xabcd]).await?;
        let h = imp.get16(136, 1).await?;
        Ok::<_, rsm::Error>(w == words && v == [0xdead_beef, 1] && h == [0xabcd])
    };
    match typed.await {
        Ok(true) => {}
        Ok(false) => return "fail typed: wrong items".into(),
        Err(e) => return format!("fail typed: {}", e.name()),
    }
    // An explicit barrier around a put.
    let barrier = async {
        imp.set_mode(BarrierMode::Explicit)?;
        let b = imp.init_barrier()?;
        b.open()?;
        imp.put(256, vec![9u8; 4096]).await?;
        b.close().await?;
        b.destroy()?;
        imp.set_mode(BarrierMode::Implicit)?;
        let (_, back) = imp.get(256, vec![0u8; 4096]).await?;
        Ok::<_, rsm::Error>(back == vec![9u8; 4096])
    };
    match barrier.await {
        Ok(true) => {}
        Ok(false) => return "fail barrier: wrong bytes".into(),
        Err(e) => return format!("fail barrier: {}", e.name()),
    }
    // Last, the largest put again, for the exporter to check at offset 0.
    let last = SIZES.len() as u64 + 1;
    match imp.put(0, pattern(last, 64 << 20)).await {
        Ok(_) => format!("ok {last}"),
        Err(e) => format!("fail last put: {}", e.error().name()),
    }
}

impl State {
    async fn command(&mut self, words: &[&str]) -> String {
        let started = Instant::now();
        match words {
            ["export", ctrl, size, list] => {
                let seg = async {
                    let c = self.node.controller(ctrl).await?;
                    let seg = c.export(size.parse().unwrap(), ExportFlags::empty())?;
                    let id = seg.publish(None, &acl(list)).await?;
                    Ok::<_, rsm::Error>((seg, id))
                };
                match seg.await {
                    Ok((seg, id)) => {
                        let label = format!("exp{}", self.exports.len());
                        collect(label, seg.events(), Arc::clone(&self.events));
                        self.exports.push(seg);
                        format!("seg {} {}", self.exports.len() - 1, id.get())
                    }
                    Err(e) => err_line(&e, started),
                }
            }
            ["import", ctrl, node, seg] => {
                let imp = async {
                    let c = self.node.controller(ctrl).await?;
                    let id = SegmentId(seg.parse().unwrap());
                    c.import(NodeId(node.parse().unwrap()), id, Perm::RDWR)
                        .await
                };
                match imp.await {
                    Ok(imp) => {
                        let label = format!("imp{}", self.imports.len());
                        collect(label, imp.events(), Arc::clone(&self.events));
                        self.imports.push(imp);
                        format!(
                            "imp {} {}",
                            self.imports.len() - 1,
                            started.elapsed().as_millis()
                        )
                    }
                    Err(e) => {
                        let line = err_line(&e, started);
                        eprintln!("import: {e}");
                        line
                    }
                }
            }
            ["check", e, off, seed, len] => {
                let len = len.parse().unwrap();
                let mut buf = vec![0u8; len];
                let seg = &self.exports[e.parse::<usize>().unwrap()];
                seg.read_at(off.parse().unwrap(), &mut buf).unwrap();
                let same = buf == pattern(seed.parse().unwrap(), len);
                if same { "same" } else { "differs" }.into()
            }
            ["data", i] => data(&self.imports[i.parse::<usize>().unwrap()]).await,
            ["put", i, len] => {
                let imp = &self.imports[i.parse::<usize>().unwrap()];
                match imp.put(0, vec![5u8; len.parse().unwrap()]).await {
                    Ok(_) => format!("ok {}", started.elapsed().as_millis()),
                    Err(e) => err_line(e.error(), started),
                }
            }
            ["signal", i] => {
                let imp = &self.imports[i.parse::<usize>().unwrap()];
                match imp.signal(SignalFlags::empty()).await {
                    Ok(()) => "ok".into(),
                    Err(e) => err_line(&e, started),
                }
            }
            ["esignal", e] => {
                let seg = &self.exports[e.parse::<usize>().unwrap()];
                match seg.signal(SignalFlags::empty()).await {
                    Ok(()) => "ok".into(),
                    Err(e) => err_line(&e, started),
                }
            }
            ["ewait", e, ms] => {
                let seg = &self.exports[e.parse::<usize>().unwrap()];
                let t = Duration::from_millis(ms.parse().unwrap());
                match seg.wait_signal(Some(t)).await {
                    Ok(who) => format!("signalled {}", who.node().get()),
                    Err(e) => err_line(&e, started),
                }
            }
            ["iwait", i, ms] => {
                let imp = &self.imports[i.parse::<usize>().unwrap()];
                let t = Duration::from_millis(ms.parse().unwrap());
                match imp.wait_signal(Some(t)).await {
                    Ok(who) => format!("signalled {}", who.get()),
                    Err(e) => err_line(&e, started),
                }
            }
            ["events"] => self.events.lock().unwrap().join(";"),
            ["stream", i] => {
                // Puts one after the other until one fails: operations pending at a fault.
                let imp = self.imports[i.parse::<usize>().unwrap()].clone();
                let outcome = Arc::clone(&self.outcome);
                *outcome.lock().unwrap() = None;
                tokio::spawn(async move {
                    loop {
                        if let Err(e) = imp.put(0, vec![3u8; 1 << 20]).await {
                            *outcome.lock().unwrap() =
                                Some((e.error().name().to_string(), Instant::now()));
                            return;
                        }
                    }
                });
                "ok".into()
            }
            ["mark"] => {
                self.mark = Instant::now();
                "ok".into()
            }
            ["outcome", ms] => {
                let until = Instant::now() + Duration::from_millis(ms.parse().unwrap());
                loop {
                    if let Some((name, at)) = self.outcome.lock().unwrap().clone() {
                        let ms = at.saturating_duration_since(self.mark).as_millis();
                        break format!("{name} {ms}");
                    }
                    if Instant::now() >= until {
                        break "none".into();
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            ["work", rest @ ..] => crate::records::command(&self.node, &self.records, rest).await,
            other => panic!("unknown command {other:?}"),
        }
    }
}

/// The node role: `ready <node id> <incarnation>`, then commands until `quit`.
pub fn node_role() {
    let rt = crate::common::runtime();
    let node = match rt.block_on(rsm::Node::builder().start()) {
        Ok(n) => n,
        Err(e) => {
            say(format!("err {} 0 {e}", e.name()));
            return;
        }
    };
    say(format!("ready {} {}", node.id().get(), node.incarnation()));
    let mut st = State {
        node,
        exports: Vec::new(),
        imports: Vec::new(),
        events: Arc::default(),
        outcome: Arc::default(),
        mark: Instant::now(),
        records: Mutex::default(),
    };
    while let Some(cmd) = next_command() {
        let words: Vec<&str> = cmd.split_whitespace().collect();
        if matches!(words.as_slice(), ["quit"] | []) {
            break;
        }
        // The workload's stop and read-back bound their own awaits, and take longer.
        let limit = if words[0] == "work" { 4 * LIMIT } else { LIMIT };
        let answer = rt.block_on(async {
            tokio::time::timeout(limit, st.command(&words))
                .await
                .unwrap_or_else(|_| "hang".into())
        });
        say(answer);
    }
    rt.block_on(st.node.shutdown());
}
