//! What the parent and its children agree on: the operation kinds, the bound every await
//! must end within, and the tally a child's loops keep and report.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Every await of a loop ends within this, or it is a hang.
pub const BOUND: Duration = Duration::from_secs(5);
/// The main segment's id (a restarted exporter publishes it again).
pub const SEGID: u32 = 0x40_0100;
/// The id the publish loop publishes and destroys its second segment under.
pub const PUB_ID: u32 = 0x40_0101;

/// The operation a round runs in a loop while one side is killed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Put,
    Get,
    Putv,
    Getv,
    /// The importer signals, the exporter waits.
    Signal,
    /// The exporter signals, the importer waits.
    Wait,
    Atomics,
    /// Loopback only: map, read through the mapping, unmap.
    Map,
    Barrier,
    /// The exporter publishes and destroys a second segment; the importer imports it.
    Publish,
    /// The exporter unpublishes and republishes the segment the importer reads.
    Unpublish,
    /// The exporter rebinds the segment the importer reads.
    Rebind,
}

impl Kind {
    pub const ALL: [Kind; 12] = [
        Kind::Put,
        Kind::Get,
        Kind::Putv,
        Kind::Getv,
        Kind::Signal,
        Kind::Wait,
        Kind::Atomics,
        Kind::Map,
        Kind::Barrier,
        Kind::Publish,
        Kind::Unpublish,
        Kind::Rebind,
    ];

    /// The kinds controller `ctrl` runs (mappings exist on loopback only), or those of
    /// them `RSM_FAULT_KINDS` names (`put,rebind`).
    pub fn on(ctrl: &str) -> Vec<Kind> {
        let only = std::env::var("RSM_FAULT_KINDS").unwrap_or_default();
        Kind::ALL
            .into_iter()
            .filter(|k| *k != Kind::Map || ctrl == "loopback")
            .filter(|k| only.is_empty() || only.split(',').any(|n| n == k.name()))
            .collect()
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Put => "put",
            Kind::Get => "get",
            Kind::Putv => "putv",
            Kind::Getv => "getv",
            Kind::Signal => "signal",
            Kind::Wait => "wait",
            Kind::Atomics => "atomics",
            Kind::Map => "map",
            Kind::Barrier => "barrier",
            Kind::Publish => "publish",
            Kind::Unpublish => "unpublish",
            Kind::Rebind => "rebind",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == s)
    }

    /// Whether the importer's loop ends by itself once its exporter is lost (the others
    /// retry imports until stopped).
    pub fn ends_on_loss(self) -> bool {
        !matches!(self, Kind::Publish | Kind::Unpublish)
    }

    /// Whether the importer writes records in lanes (checked at the exporter afterwards).
    pub fn writes_lanes(self) -> bool {
        matches!(self, Kind::Put | Kind::Putv | Kind::Barrier)
    }

    /// The errors a survivor's loop may see besides the peer's loss (`CONN_ABORTED`,
    /// `REMOTE_NODE_UNREACHABLE`).
    pub fn also_allowed(self) -> &'static [&'static str] {
        match self {
            Kind::Signal | Kind::Wait => &["RSMERR_TIMEOUT", "RSMERR_SEG_NOT_CONNECTED"],
            // Imports race with the exporter's publish and unpublish.
            Kind::Publish | Kind::Unpublish => &[
                "RSMERR_SEG_NOT_PUBLISHED",
                "RSMERR_SEG_NOT_CONNECTED",
                "RSMERR_SEG_NOT_PUBLISHED_TO_NODE",
            ],
            _ => &[],
        }
    }
}

/// Milliseconds since the epoch: the parent and its children share the clock.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as u64
}

/// What a child's loops did: operations that succeeded, errors by name, awaits past
/// [`BOUND`], wrong data, errors no kind allows, and when the first and last failure came.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Tally {
    pub ops: u64,
    pub errors: BTreeMap<String, u64>,
    pub hangs: u64,
    pub data: u64,
    pub bad: u64,
    pub first_fail: u64,
    pub last_fail: u64,
    /// Loop tasks still running when told to stop (those that end on a loss had not).
    pub left: u64,
    /// The first hang, data error or unexpected error, said in words (no spaces).
    pub note: String,
}

impl Tally {
    fn noted(&mut self, what: String) {
        if self.note.is_empty() {
            self.note = what.replace(char::is_whitespace, "_");
        }
    }

    pub fn failure(&mut self, e: &rsm::Error, kind: Kind) {
        let name = e.name();
        *self.errors.entry(name.to_string()).or_default() += 1;
        let now = now_ms();
        if self.first_fail == 0 {
            self.first_fail = now;
        }
        self.last_fail = now;
        if !e.is_unreachable() && !kind.also_allowed().contains(&name) {
            self.bad += 1;
            self.noted(format!("{} at {now}: {e}", kind.name()));
        }
    }

    pub fn hang(&mut self, what: &str) {
        self.hangs += 1;
        self.noted(format!("hang: {what}"));
    }

    pub fn data_error(&mut self, what: String) {
        self.data += 1;
        self.noted(format!("data: {what}"));
    }

    /// Adds another tally's counts.
    pub fn add(&mut self, o: &Tally) {
        self.ops += o.ops;
        for (k, v) in &o.errors {
            *self.errors.entry(k.clone()).or_default() += v;
        }
        self.hangs += o.hangs;
        self.data += o.data;
        self.bad += o.bad;
        self.left += o.left;
        if self.note.is_empty() {
            self.note = o.note.clone();
        }
    }

    /// The line a child answers `stop` with.
    pub fn line(&self) -> String {
        let errs: Vec<String> = self
            .errors
            .iter()
            .map(|(k, v)| format!("{k}:{v}"))
            .collect();
        format!(
            "stopped ops={} hangs={} data={} bad={} fail={},{} left={} errs={} note={}",
            self.ops,
            self.hangs,
            self.data,
            self.bad,
            self.first_fail,
            self.last_fail,
            self.left,
            errs.join(","),
            self.note
        )
    }

    /// The tally a `stopped` line carries.
    pub fn parse(line: &str) -> Option<Tally> {
        let mut t = Tally::default();
        let mut w = line.split(' ');
        (w.next()? == "stopped").then_some(())?;
        for field in w {
            let (k, v) = field.split_once('=')?;
            match k {
                "ops" => t.ops = v.parse().ok()?,
                "hangs" => t.hangs = v.parse().ok()?,
                "data" => t.data = v.parse().ok()?,
                "bad" => t.bad = v.parse().ok()?,
                "fail" => {
                    let (a, b) = v.split_once(',')?;
                    t.first_fail = a.parse().ok()?;
                    t.last_fail = b.parse().ok()?;
                }
                "errs" => {
                    for e in v.split(',').filter(|e| !e.is_empty()) {
                        let (name, n) = e.split_once(':')?;
                        t.errors.insert(name.to_string(), n.parse().ok()?);
                    }
                }
                "left" => t.left = v.parse().ok()?,
                "note" => t.note = v.to_string(),
                _ => return None,
            }
        }
        Some(t)
    }
}

/// A tally shared by a child's loop tasks.
pub type Shared = Arc<Mutex<Tally>>;

/// Runs `f` within [`BOUND`]; `None` (a hang, tallied) if it did not end.
pub async fn timed<F: std::future::Future>(tally: &Shared, what: &str, f: F) -> Option<F::Output> {
    match tokio::time::timeout(BOUND, f).await {
        Ok(out) => Some(out),
        Err(_) => {
            tally.lock().unwrap().hang(what);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tally_lines_round_trip() {
        let mut t = Tally {
            ops: 5,
            hangs: 1,
            first_fail: 3,
            last_fail: 4,
            note: "hang:_put".into(),
            ..Tally::default()
        };
        t.errors.insert("RSMERR_CONN_ABORTED".into(), 2);
        assert_eq!(Tally::parse(&t.line()), Some(t));
        assert_eq!(
            Tally::parse(&Tally::default().line()),
            Some(Tally::default())
        );
    }
}
