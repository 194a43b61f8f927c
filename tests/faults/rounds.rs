//! The parent's side of a fault round: an exporter child and an importer child run one kind
//! of operation in a loop, one of them is killed (`SIGKILL`) after a random delay, the
//! survivor reports how its awaits ended, the killed one restarts under its node id, and
//! the pair must work again. What went wrong is counted, never panicked on, so a soak can
//! run on and report.

use crate::proc::{Proc, how};
use crate::records::{self, LANES, PER_LANE, RECORD_SLOTS};
use crate::shared::{BOUND, Kind, Tally, now_ms};
use std::collections::BTreeMap;
use std::time::Duration;

/// How long the parent waits for a child's answer: far past the child's own bounds (a
/// disconnect and an import, 5 s each), so only a wedged child gets no answer, and a late
/// answer is never taken for the next one's.
pub const ANSWER_WITHIN: Duration = Duration::from_secs(30);

/// Which side a round kills.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Victim {
    Exporter,
    Importer,
}

/// What rounds found: runs, faults injected, and the three things that must not happen
/// (hangs, crashes, data errors), plus errors no operation allows.
#[derive(Debug, Default)]
pub struct Outcome {
    pub runs: u64,
    pub faults: u64,
    pub hangs: Vec<String>,
    pub crashes: Vec<String>,
    pub data_errors: Vec<String>,
    pub unexpected: Vec<String>,
    /// Connects that failed once and worked when retried.
    pub retried: Vec<String>,
    /// The survivors' loops, summed.
    pub tally: Tally,
    /// The longest time from a kill to the importer's loops ending by themselves, and the
    /// round it was seen in.
    pub worst_loss_ms: u64,
    pub worst_loss_in: String,
}

impl Outcome {
    pub fn clean(&self) -> bool {
        self.hangs.is_empty()
            && self.crashes.is_empty()
            && self.data_errors.is_empty()
            && self.unexpected.is_empty()
    }

    pub fn add(&mut self, o: Outcome) {
        self.runs += o.runs;
        self.faults += o.faults;
        self.hangs.extend(o.hangs);
        self.crashes.extend(o.crashes);
        self.data_errors.extend(o.data_errors);
        self.unexpected.extend(o.unexpected);
        self.retried.extend(o.retried);
        self.tally.add(&o.tally);
        if o.worst_loss_ms > self.worst_loss_ms {
            self.worst_loss_ms = o.worst_loss_ms;
            self.worst_loss_in = o.worst_loss_in;
        }
    }

    /// One line of counts, then the first ten failures of each kind, one a line.
    pub fn summary(&self, what: &str) -> String {
        let errs: BTreeMap<_, _> = self.tally.errors.iter().collect();
        let mut s = format!(
            "{what}: runs {}, faults {}, hangs {}, crashes {}, data errors {}, unexpected errors \
             {}, connects retried {}; {} operations, loss seen at most {} ms after a kill \
             ({}); errors {errs:?}",
            self.runs,
            self.faults,
            self.hangs.len(),
            self.crashes.len(),
            self.data_errors.len(),
            self.unexpected.len(),
            self.retried.len(),
            self.tally.ops,
            self.worst_loss_ms,
            self.worst_loss_in,
        );
        for list in [
            &self.hangs,
            &self.crashes,
            &self.data_errors,
            &self.unexpected,
            &self.retried,
        ] {
            for line in list.iter().take(10) {
                s.push_str(&format!("\n  {line}"));
            }
        }
        s
    }
}

/// An exporter and an importer child on one controller.
pub struct Pair {
    pub ctrl: String,
    pub exporter_id: u32,
    pub importer_id: u32,
    pub exporter: Proc,
    pub importer: Proc,
}

fn ready(p: &Proc) -> bool {
    p.recv_within(Duration::from_secs(30)).as_deref() == Some("ready")
}

impl Pair {
    /// Starts both children (node ids `id` and `id + 1`) and connects the importer.
    pub fn start(ctrl: &str, id: u32, out: &mut Outcome) -> Pair {
        let mut pair = Pair {
            ctrl: ctrl.to_string(),
            exporter_id: id,
            importer_id: id + 1,
            exporter: start_exporter(ctrl, id),
            importer: start_importer(ctrl, id + 1, id),
        };
        for (who, p) in [("exporter", &pair.exporter), ("importer", &pair.importer)] {
            if !ready(p) {
                out.crashes.push(format!("{ctrl}: the {who} did not start"));
            }
        }
        pair.connect("start", out);
        pair
    }

    /// Imports the exporter's segment; one retry (counted) when the first attempt fails or
    /// passes its bound, since a freshly started peer on a starved machine may answer its
    /// first hello late.
    fn connect(&mut self, ctx: &str, out: &mut Outcome) -> bool {
        let limit = ANSWER_WITHIN;
        let mut first = None;
        for _ in 0..2 {
            match self.importer.ask("connect", limit) {
                Some(a) if a == "connected" => {
                    if let Some(f) = first {
                        out.retried.push(format!("{ctx}: connect: {f}"));
                    }
                    return true;
                }
                Some(a) => first = first.or(Some(a)),
                None => {
                    out.hangs
                        .push(format!("{ctx}: connect: no answer within {limit:?}"));
                    return false;
                }
            }
        }
        let a = first.unwrap_or_default();
        if a.starts_with("hang") {
            out.hangs.push(format!("{ctx}: connect, twice: {a}"));
        } else {
            out.unexpected.push(format!("{ctx}: connect, twice: {a}"));
        }
        false
    }

    /// Whether a child the round did not kill is still alive; a crash if not.
    fn alive(&mut self, ctx: &str, out: &mut Outcome) -> bool {
        let mut ok = true;
        for (who, p) in [
            ("exporter", &mut self.exporter),
            ("importer", &mut self.importer),
        ] {
            if let Some(s) = p.exited() {
                out.crashes
                    .push(format!("{ctx}: the {who} died: {}", how(s)));
                ok = false;
            }
        }
        ok
    }

    /// One round: `kind` in a loop, `victim` killed after `delay`, restarted; records
    /// written from sequence `base + 1`.
    pub fn round(
        &mut self,
        kind: Kind,
        victim: Victim,
        delay: Duration,
        base: u64,
        out: &mut Outcome,
    ) {
        let mut ctx = format!(
            "{} {} kill {victim:?} after {} ms",
            self.ctrl,
            kind.name(),
            delay.as_millis()
        );
        out.runs += 1;
        if !self.alive(&ctx, out) || !self.connect(&ctx, out) {
            self.restart_both(&ctx, out);
            return;
        }
        let exp = self
            .exporter
            .ask(&format!("run {}", kind.name()), ANSWER_WITHIN);
        let imp = self
            .importer
            .ask(&format!("run {} {base}", kind.name()), ANSWER_WITHIN);
        if exp.as_deref() != Some("running") || imp.as_deref() != Some("running") {
            out.unexpected.push(format!("{ctx}: run: {exp:?} {imp:?}"));
            self.restart_both(&ctx, out);
            return;
        }
        std::thread::sleep(delay);
        let killed_at = now_ms();
        ctx.push_str(&format!(" (at {killed_at})"));
        out.faults += 1;
        let stop_limit = BOUND * 3 + ANSWER_WITHIN;
        let answer = match victim {
            Victim::Exporter => {
                self.exporter.kill();
                // Loops that end on a loss are given the bound to see it.
                let wait = if kind.ends_on_loss() {
                    BOUND + Duration::from_secs(1)
                } else {
                    Duration::ZERO
                };
                self.importer
                    .ask(&format!("stop {}", wait.as_millis()), stop_limit)
            }
            Victim::Importer => {
                self.importer.kill();
                self.exporter.ask("stop", stop_limit)
            }
        };
        match answer.as_deref().and_then(Tally::parse) {
            Some(t) => {
                if t.hangs > 0 {
                    out.hangs.push(format!(
                        "{ctx}: {} awaits past their bound: {}",
                        t.hangs, t.note
                    ));
                }
                if victim == Victim::Exporter && kind.ends_on_loss() {
                    if t.left > 0 {
                        out.hangs.push(format!(
                            "{ctx}: {} loops did not see the loss within {BOUND:?}",
                            t.left
                        ));
                    } else if t.last_fail >= killed_at
                        && t.last_fail - killed_at > out.worst_loss_ms
                    {
                        out.worst_loss_ms = t.last_fail - killed_at;
                        out.worst_loss_in = ctx.clone();
                    }
                }
                if t.data > 0 {
                    out.data_errors
                        .push(format!("{ctx}: {} data errors: {}", t.data, t.note));
                }
                if t.bad > 0 {
                    out.unexpected
                        .push(format!("{ctx}: {} unexpected errors: {}", t.bad, t.note));
                }
                out.tally.add(&t);
            }
            None => {
                let survivor = match victim {
                    Victim::Exporter => "importer",
                    Victim::Importer => "exporter",
                };
                out.hangs.push(format!(
                    "{ctx}: the {survivor} answered stop with {answer:?}"
                ));
            }
        }
        let progress = self.importer.take_progress();
        // The same node id, a new process.
        match victim {
            Victim::Exporter => {
                self.exporter = start_exporter(&self.ctrl, self.exporter_id);
                if !ready(&self.exporter) {
                    out.crashes
                        .push(format!("{ctx}: the restarted exporter did not start"));
                }
            }
            Victim::Importer => {
                self.importer = start_importer(&self.ctrl, self.importer_id, self.exporter_id);
                if !ready(&self.importer) {
                    out.crashes
                        .push(format!("{ctx}: the restarted importer did not start"));
                }
            }
        }
        if !self.alive(&ctx, out) {
            self.restart_both(&ctx, out);
            return;
        }
        let connected = self.connect(&format!("{ctx}, after the restart"), out);
        // Once the dead importer's writes can no longer land: what the exporter holds.
        if victim == Victim::Importer && (kind.writes_lanes() || kind == Kind::Atomics) {
            self.check_records(&ctx, kind, base, progress.unwrap_or_default(), out);
        }
        if connected {
            match self
                .importer
                .ask(&format!("check {}", base + 999_999), ANSWER_WITHIN)
            {
                Some(a) if a == "ok" => {}
                Some(a) if a.starts_with("hang") => out
                    .hangs
                    .push(format!("{ctx}: check after the restart: {a}")),
                Some(a) if a.contains("read back") => {
                    out.data_errors.push(format!("{ctx}: check: {a}"))
                }
                other => out
                    .unexpected
                    .push(format!("{ctx}: check after the restart: {other:?}")),
            }
        }
        self.alive(&ctx, out);
    }

    /// What the exporter holds after the importer was killed mid-`kind`: every acknowledged
    /// write there with its value, only a write in flight torn; every acknowledged
    /// fetch-add counted.
    fn check_records(
        &mut self,
        ctx: &str,
        kind: Kind,
        base: u64,
        acked: Vec<u64>,
        out: &mut Outcome,
    ) {
        let Some(line) = self.exporter.ask("records", ANSWER_WITHIN) else {
            out.hangs
                .push(format!("{ctx}: the exporter did not report its records"));
            return;
        };
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.len() != 2 + RECORD_SLOTS + LANES || words[0] != "records" {
            out.unexpected.push(format!("{ctx}: records: {line}"));
            return;
        }
        let seqs: Vec<Option<u64>> = words[1..=RECORD_SLOTS]
            .iter()
            .map(|w| w.parse().ok())
            .collect();
        let counters: Vec<u64> = words[2 + RECORD_SLOTS..]
            .iter()
            .map(|w| w.parse().unwrap_or(0))
            .collect();
        let acked = |lane: usize| acked.get(lane).copied().unwrap_or(0);
        if kind == Kind::Atomics {
            for (lane, &c) in counters.iter().enumerate() {
                if c < acked(lane) {
                    out.data_errors.push(format!(
                        "{ctx}: lane {lane}'s counter is {c}, {} acknowledged",
                        acked(lane)
                    ));
                }
            }
            return;
        }
        for lane in 0..LANES {
            let lane_seqs = &seqs[lane * PER_LANE..(lane + 1) * PER_LANE];
            if let Err(e) = records::check_lane(lane_seqs, base, acked(lane)) {
                out.data_errors.push(format!("{ctx}: lane {lane}: {e}"));
            }
        }
        if seqs[records::CHECK_SLOT].is_none() {
            out.data_errors
                .push(format!("{ctx}: the check slot is torn"));
        }
    }

    /// After a failed step: both children anew (a crash or hang was counted already).
    fn restart_both(&mut self, ctx: &str, out: &mut Outcome) {
        self.exporter.kill();
        self.importer.kill();
        self.exporter = start_exporter(&self.ctrl, self.exporter_id);
        self.importer = start_importer(&self.ctrl, self.importer_id, self.exporter_id);
        if !ready(&self.exporter) || !ready(&self.importer) {
            out.crashes
                .push(format!("{ctx}: a fresh pair did not start"));
        }
        self.connect(&format!("{ctx}, a fresh pair"), out);
    }

    /// Asks both to quit: each must exit 0.
    pub fn finish(mut self, out: &mut Outcome) {
        for (who, p) in [
            ("exporter", &mut self.exporter),
            ("importer", &mut self.importer),
        ] {
            match p.quit(Duration::from_secs(15)) {
                Some(s) if s.success() => {}
                Some(s) => {
                    out.crashes
                        .push(format!("{}: the {who} ended with {}", self.ctrl, how(s)))
                }
                None => out
                    .hangs
                    .push(format!("{}: the {who} did not quit within 15 s", self.ctrl)),
            }
        }
    }
}

pub fn start_exporter(ctrl: &str, id: u32) -> Proc {
    Proc::start(
        "fexporter",
        &[("NODE_ID", id.to_string()), ("CTRL", ctrl.to_string())],
    )
}

pub fn start_importer(ctrl: &str, id: u32, exporter: u32) -> Proc {
    Proc::start(
        "fimporter",
        &[
            ("NODE_ID", id.to_string()),
            ("CTRL", ctrl.to_string()),
            ("EXPORTER", exporter.to_string()),
        ],
    )
}
