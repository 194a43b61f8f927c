//! The standard set (docs/performance.md, Method) as `rsm bench` runs: the 8-byte rows
//! measured by alternating process pairs ([`small_rows`]) and the rest ([`plan`]).

/// The controllers of the standard set, in the order they run.
pub const CONTROLLERS: &[&str] = &["tcp0", "shm0", "loopback", "sockets0"];

/// The controllers whose 8-byte rows are measured by [`SMALL_PAIRS`] alternating pairs;
/// sockets0's stay in [`plan`], with [`PAIRS`] pairs where they have a target.
pub const PAIRED_CONTROLLERS: &[&str] = &["tcp0", "shm0", "loopback"];

/// The size of the small rows.
pub const SMALL: usize = 8;

const SMALL_TO_LARGE: &[usize] = &[SMALL, 4 << 10, 64 << 10, 1 << 20];
const VECTOR_SIZES: &[usize] = &[4 << 10, 64 << 10, 1 << 20];
const ONE_WORD: &[usize] = &[SMALL];

/// The operations of the standard set with their sizes.
pub const OPS: &[(&str, &[usize])] = &[
    ("put", SMALL_TO_LARGE),
    ("get", SMALL_TO_LARGE),
    ("putv", VECTOR_SIZES),
    ("getv", VECTOR_SIZES),
    ("signal", ONE_WORD),
    // Remote atomics: one u64 per operation in flight (`rsm bench` ignores the size).
    ("fetch-add", ONE_WORD),
    ("cswap", ONE_WORD),
    ("add", ONE_WORD),
    // The service round: put a record, signal, await the answer's signal.
    ("round", ONE_WORD),
];

pub const MODES: &[&str] = &["latency", "bandwidth"];

/// Interleaved rounds per run of [`plan`] (`rsm bench --rounds`, which splits the row's
/// samples over them): with 5, up to two rounds of a side disturbed by a neighbour on this
/// shared 2-core machine are outvoted.
pub const ROUNDS: u32 = 5;

/// Interleaved rounds per small-row pair: the pairs, not the rounds, outvote a neighbour.
pub const SMALL_ROUNDS: u32 = 2;

/// Process pairs per row of [`plan`] with a target. A row's ratio moves from pair to pair
/// by far more than between the rounds of one pair (the scheduler's placement of the two
/// processes' threads), so one pair does not decide a target.
pub const PAIRS: usize = 5;

/// Process pairs per small row: their median and quartiles decide a row near its target.
pub const SMALL_PAIRS: usize = 12;

/// The window of the rate rows compared with UCX.
pub const WIDE_WINDOW: usize = 64;
/// Tokio tasks of the tasks rows, each awaiting its own 8-byte puts, against the baseline's
/// window of the same depth: the rate against the number of tasks. The counts with a target
/// (`row::CROWDS`) run in every pair, the others in [`SWEEP_PAIRS`].
pub const TASKS: &[usize] = &[1, 4, 16, 64, 256, 1024];
/// Pairs of the tasks rows without a target: they draw the curve, they decide nothing.
pub const SWEEP_PAIRS: usize = 3;

/// Latency rows up to this size take [`SMALL_LATENCY_ITERS`] samples, as OSU's latency
/// benchmarks do (10 000 iterations up to 8 KiB, 1 000 above).
const SMALL_LATENCY_MAX: usize = 8 << 10;
/// Samples of a small latency row (split over the rounds): with the default 1 000, a round
/// lasted less than the scheduler takes to move two threads it put on one core apart.
pub const SMALL_LATENCY_ITERS: usize = 10_000;

/// Bandwidth rows up to this size take [`SMALL_BANDWIDTH_ITERS`] operations.
const SMALL_BANDWIDTH_MAX: usize = 64 << 10;
/// Operations of a bandwidth row up to 64 KiB (split over the rounds): with 1 000, a round
/// of shm0 64 KiB lasted less than the kernel's 4 ms tick.
pub const SMALL_BANDWIDTH_ITERS: usize = 10_000;

/// One `rsm bench` invocation: one controller, operation and mode, some of its sizes.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub controller: &'static str,
    pub op: &'static str,
    pub mode: &'static str,
    pub sizes: Vec<usize>,
    /// `--iters`, where the default does not do.
    pub iters: Option<usize>,
    /// `--window`, where the default does not do.
    pub window: Option<usize>,
    /// `--tasks`: that many tasks each awaiting its own operations.
    pub tasks: Option<usize>,
    pub rounds: u32,
    /// The most process pairs the row runs in (small rows; the larger rows' runs take
    /// [`PAIRS`] where they have a target).
    pub pairs: usize,
}

/// Operations measured once, in latency mode (a signal and a round are round trips; an
/// add's rate says what a fetch-add's does).
fn latency_only(op: &str) -> bool {
    matches!(op, "signal" | "add" | "round")
}

fn iters_for(mode: &str, size: usize) -> Option<usize> {
    let (max, iters) = if mode == "latency" {
        (SMALL_LATENCY_MAX, SMALL_LATENCY_ITERS)
    } else {
        (SMALL_BANDWIDTH_MAX, SMALL_BANDWIDTH_ITERS)
    };
    (size <= max).then_some(iters)
}

/// The operation and mode pairs of the standard set with their sizes, in running order.
fn rows_by_op() -> impl Iterator<Item = (&'static str, &'static str, &'static [usize])> {
    OPS.iter().flat_map(|&(op, sizes)| {
        MODES
            .iter()
            .filter(move |&&mode| mode == "latency" || !latency_only(op))
            .map(move |&mode| (op, mode, sizes))
    })
}

/// Every run but the small rows', in running order: per controller, put and get first; in
/// each, the sizes that take more samples apart from the rest.
pub fn plan() -> Vec<Job> {
    let mut jobs = Vec::new();
    for &controller in CONTROLLERS {
        let paired = PAIRED_CONTROLLERS.contains(&controller);
        for (op, mode, sizes) in rows_by_op() {
            let sizes: Vec<usize> = sizes
                .iter()
                .copied()
                .filter(|&s| !(paired && s == SMALL))
                .collect();
            let (small, large): (Vec<usize>, Vec<usize>) =
                sizes.iter().partition(|&&s| iters_for(mode, s).is_some());
            for (sizes, iters) in [(small, iters_for(mode, SMALL)), (large, None)] {
                if !sizes.is_empty() {
                    jobs.push(Job {
                        controller,
                        op,
                        mode,
                        sizes,
                        iters,
                        window: None,
                        tasks: None,
                        rounds: ROUNDS,
                        pairs: PAIRS,
                    });
                }
            }
        }
    }
    jobs
}

/// The 8-byte rows of the paired controllers, each its own run, in the order a pair runs
/// them: per controller the standard set's, then the wide-window put rate (loopback, to
/// compare with UCX) and the tasks rows (each count of [`TASKS`] against a window as deep).
pub fn small_rows() -> Vec<Job> {
    let small = |controller, op, mode, window, tasks| Job {
        controller,
        op,
        mode,
        sizes: vec![SMALL],
        iters: iters_for(mode, SMALL),
        window,
        tasks,
        rounds: SMALL_ROUNDS,
        pairs: SMALL_PAIRS,
    };
    let mut jobs = Vec::new();
    for &controller in PAIRED_CONTROLLERS {
        for (op, mode, sizes) in rows_by_op() {
            if sizes.contains(&SMALL) {
                jobs.push(small(controller, op, mode, None, None));
            }
        }
        if controller == "loopback" {
            jobs.push(small(
                controller,
                "put",
                "bandwidth",
                Some(WIDE_WINDOW),
                None,
            ));
        }
        for &tasks in TASKS {
            let mut job = small(controller, "put", "bandwidth", Some(tasks), Some(tasks));
            if !crate::row::CROWDS.contains(&tasks) {
                job.pairs = SWEEP_PAIRS;
            }
            jobs.push(job);
        }
    }
    jobs
}

/// What `cargo xtask bench` runs: the whole plan, or part of it (`--quick`, `--rows`,
/// `--pairs`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Selection {
    /// At most this many pairs per small row (and larger rows in one pair each).
    pub pairs: Option<usize>,
    /// Only the rows whose `controller op mode` text contains one of these.
    pub rows: Vec<String>,
    /// No memory runs, no larger rows.
    pub small_only: bool,
    /// Copy the final SVGs to docs/bench/.
    pub publish: bool,
}

impl Selection {
    /// From `cargo xtask bench`'s arguments: `--quick` (2 pairs, the small rows only),
    /// `--small` (the small rows only, every pair), `--pairs N`, `--rows a,b` (substrings of `controller op mode`, or `tasks`),
    /// `--publish`.
    pub fn parse(args: &[String]) -> Result<Selection, String> {
        let mut sel = Selection::default();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            match a.as_str() {
                "--quick" => {
                    sel.pairs = Some(2);
                    sel.small_only = true;
                }
                "--small" => sel.small_only = true,
                "--publish" => sel.publish = true,
                "--pairs" => {
                    let n = it.next().ok_or("--pairs needs a number")?;
                    let n: usize = n
                        .parse()
                        .map_err(|_| format!("--pairs {n}: not a number"))?;
                    if n == 0 {
                        return Err("--pairs is at least 1".into());
                    }
                    sel.pairs = Some(n);
                }
                "--rows" => {
                    let list = it.next().ok_or("--rows needs a list")?;
                    sel.rows.extend(
                        list.split(',')
                            .map(|w| w.trim().to_string())
                            .filter(|w| !w.is_empty()),
                    );
                }
                other => return Err(format!("unexpected argument `{other}`")),
            }
        }
        Ok(sel)
    }

    /// Whether `job` is selected.
    pub fn wants(&self, job: &Job) -> bool {
        let text = format!(
            "{} {} {}{}",
            job.controller,
            job.op,
            job.mode,
            if job.tasks.is_some() { " tasks" } else { "" }
        );
        self.rows.is_empty() || self.rows.iter().any(|w| text.contains(w.as_str()))
    }

    /// `job` as selected: fewer pairs where asked.
    pub fn shape(&self, mut job: Job) -> Job {
        if let Some(n) = self.pairs {
            job.pairs = job.pairs.min(n);
        }
        job
    }

    /// The most pairs any small row runs in.
    pub fn small_pairs(&self) -> usize {
        self.pairs.map_or(SMALL_PAIRS, |n| n.min(SMALL_PAIRS))
    }
}

/// The order of pair `pair`'s runs over `n` rows: as listed in even pairs, reversed in odd
/// ones, so drift over the pairs hits every row alike.
pub fn pair_order(pair: usize, n: usize) -> Vec<usize> {
    if pair % 2 == 0 {
        (0..n).collect()
    } else {
        (0..n).rev().collect()
    }
}

/// `[possible values: a, b]` on the help line of `flag`.
pub fn parse_possible_values(help: &str, flag: &str) -> Vec<String> {
    help.lines()
        .find(|l| l.trim_start().starts_with(flag))
        .and_then(|l| l.split("[possible values: ").nth(1))
        .and_then(|rest| rest.split(']').next())
        .map(|list| list.split(',').map(|v| v.trim().to_string()).collect())
        .unwrap_or_default()
}

/// Whether the help lists the option `flag` (`--tasks`).
pub fn has_option(help: &str, flag: &str) -> bool {
    help.lines().any(|l| {
        l.trim_start()
            .split([' ', '<', '='])
            .next()
            .is_some_and(|w| w == flag)
    })
}

pub fn sizes_arg(sizes: &[usize]) -> String {
    sizes
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_covers_the_standard_set_but_the_paired_small_rows() {
        let jobs = plan();
        for c in CONTROLLERS {
            for op in ["put", "get", "putv", "getv"] {
                for mode in MODES {
                    assert!(
                        jobs.iter()
                            .any(|j| j.controller == *c && j.op == op && j.mode == *mode),
                        "{c} {op} {mode} missing"
                    );
                }
            }
        }
        // The 8-byte rows of tcp0, shm0 and loopback are the pairs'; sockets0 keeps them.
        assert!(
            jobs.iter()
                .filter(|j| PAIRED_CONTROLLERS.contains(&j.controller))
                .all(|j| !j.sizes.contains(&SMALL))
        );
        let sockets: Vec<&Job> = jobs.iter().filter(|j| j.controller == "sockets0").collect();
        for op in ["signal", "round", "add", "fetch-add", "cswap"] {
            assert!(
                sockets.iter().any(|j| j.op == op && j.sizes == [SMALL]),
                "{op}"
            );
        }
        assert!(
            !jobs
                .iter()
                .any(|j| latency_only(j.op) && j.mode != "latency")
        );
        assert!(
            jobs.iter()
                .all(|j| j.rounds == ROUNDS && j.tasks.is_none() && j.pairs == PAIRS)
        );
        let put: Vec<&Job> = jobs
            .iter()
            .filter(|j| j.controller == "tcp0" && j.op == "put")
            .collect();
        assert_eq!(put.len(), 4);
        assert_eq!(
            (put[0].mode, &put[0].sizes[..], put[0].iters),
            ("latency", &[4096][..], Some(SMALL_LATENCY_ITERS))
        );
        assert_eq!(
            (put[1].mode, &put[1].sizes[..], put[1].iters),
            ("latency", &[65536, 1 << 20][..], None)
        );
        assert_eq!(
            (put[2].mode, &put[2].sizes[..], put[2].iters),
            ("bandwidth", &[4096, 65536][..], Some(SMALL_BANDWIDTH_ITERS))
        );
        assert_eq!(
            (put[3].mode, &put[3].sizes[..], put[3].iters),
            ("bandwidth", &[1 << 20][..], None)
        );
        let sockets_put = sockets.iter().find(|j| j.op == "put").unwrap();
        assert_eq!(sockets_put.sizes, [8, 4096]);
        assert_eq!(jobs[0].controller, "tcp0");
        assert_eq!(sizes_arg(&put[2].sizes), "4096,65536");
    }

    #[test]
    fn small_rows_are_every_8_byte_row_of_the_paired_controllers() {
        let rows = small_rows();
        assert!(
            rows.iter()
                .all(|j| j.sizes == [SMALL] && j.rounds == SMALL_ROUNDS)
        );
        assert!(
            rows.iter()
                .all(|j| PAIRED_CONTROLLERS.contains(&j.controller))
        );
        for c in PAIRED_CONTROLLERS {
            let of = |op: &str, mode: &str| {
                rows.iter()
                    .filter(|j| j.controller == *c && j.op == op && j.mode == mode)
                    .count()
            };
            for op in ["put", "get", "fetch-add", "cswap"] {
                assert_eq!(of(op, "latency"), 1, "{c} {op}");
            }
            for op in ["get", "fetch-add", "cswap"] {
                assert_eq!(of(op, "bandwidth"), 1, "{c} {op}");
            }
            // The default window, the tasks rows, and on loopback the wide window.
            let puts = if *c == "loopback" { 2 } else { 1 } + TASKS.len();
            assert_eq!(of("put", "bandwidth"), puts, "{c}");
            for op in ["signal", "add", "round"] {
                assert_eq!((of(op, "latency"), of(op, "bandwidth")), (1, 0), "{c} {op}");
            }
            let tasks: Vec<&Job> = rows
                .iter()
                .filter(|j| j.controller == *c && j.tasks.is_some())
                .collect();
            assert_eq!(tasks.len(), TASKS.len());
            for (j, &n) in tasks.iter().zip(TASKS) {
                assert_eq!(
                    (j.op, j.mode, j.window, j.tasks),
                    ("put", "bandwidth", Some(n), Some(n))
                );
                let pairs = if [64, 1024].contains(&n) {
                    SMALL_PAIRS
                } else {
                    SWEEP_PAIRS
                };
                assert_eq!(j.pairs, pairs, "{c} {n} tasks");
            }
        }
        let wide: Vec<&Job> = rows
            .iter()
            .filter(|j| j.window == Some(64) && j.tasks.is_none())
            .collect();
        assert_eq!(wide.len(), 1);
        assert_eq!(wide[0].controller, "loopback");
        // 11 rows of the standard set, the tasks rows, and loopback's wide window.
        assert_eq!(rows.len(), 3 * (11 + TASKS.len()) + 1);
        assert!(rows.iter().all(|j| j.iters == Some(10_000)));
    }

    #[test]
    fn selections_pick_rows_and_pairs() {
        let args =
            |a: &[&str]| Selection::parse(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let all = args(&[]).unwrap();
        assert!(small_rows().iter().all(|j| all.wants(j)));
        assert_eq!(all.small_pairs(), SMALL_PAIRS);
        let quick = args(&["--quick", "--rows", "loopback signal, tasks"]).unwrap();
        assert!(quick.small_only && quick.pairs == Some(2) && !quick.publish);
        let picked: Vec<Job> = small_rows()
            .into_iter()
            .filter(|j| quick.wants(j))
            .collect();
        assert_eq!(picked.len(), 1 + 3 * TASKS.len());
        assert!(picked.iter().all(|j| quick.shape(j.clone()).pairs == 2));
        assert_eq!(quick.small_pairs(), 2);
        let small = args(&["--small"]).unwrap();
        assert!(small.small_only && small.pairs.is_none());
        let sel = args(&["--pairs", "3", "--publish"]).unwrap();
        assert!(sel.publish && !sel.small_only);
        let sweep = small_rows()
            .into_iter()
            .find(|j| j.tasks == Some(4))
            .unwrap();
        assert_eq!(sel.shape(sweep).pairs, 3);
        assert!(args(&["--pairs", "0"]).is_err());
        assert!(args(&["--pairs"]).is_err());
        assert!(args(&["--fast"]).is_err());
    }

    #[test]
    fn pairs_alternate_the_order_of_the_rows() {
        assert_eq!(pair_order(0, 3), [0, 1, 2]);
        assert_eq!(pair_order(1, 3), [2, 1, 0]);
        assert_eq!(pair_order(2, 3), [0, 1, 2]);
        assert!(pair_order(5, 0).is_empty());
    }

    #[test]
    fn possible_values_and_options_come_from_the_short_help() {
        let help = "Options:\n      --controller <C>  The controller\n      \
                    --op <OP>  The operation [possible values: put, get, putv]\n      \
                    --mode <MODE>  x [default: latency] [possible values: latency, bandwidth]\n      \
                    --tasks <TASKS>  Tasks each awaiting its own operations\n      \
                    --json  One JSON object per line\n";
        assert_eq!(parse_possible_values(help, "--op"), ["put", "get", "putv"]);
        assert_eq!(
            parse_possible_values(help, "--mode"),
            ["latency", "bandwidth"]
        );
        assert!(parse_possible_values(help, "--sizes").is_empty());
        assert!(has_option(help, "--tasks") && has_option(help, "--json"));
        assert!(!has_option(help, "--task") && !has_option(help, "--window"));
    }
}
