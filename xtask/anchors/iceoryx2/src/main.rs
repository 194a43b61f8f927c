//! The bench's iceoryx2 anchor (docs/performance.md, Method): round trips of 8 bytes between
//! two processes on the `iceoryx2` crate, beside rsm's loopback and shm0 rows.
//!
//! `rsm-anchor-iceoryx2 --test pubsub|event [--iters N] [--warmup N]` starts itself again as
//! the echoing process, measures N round trips after the warm-up and prints one JSON line:
//! `{"test":"pubsub","samples":N,"median_us":..,"p99_us":..,"p999_us":..,"min_us":..}`.
//!
//! - `pubsub`: a publish-subscribe ping-pong of one `u64` through two services, both sides
//!   busy-polling `receive`.
//! - `event`: a notification answered by a notification through two event services, both
//!   listeners asleep in `timed_wait`.
//!
//! Every file iceoryx2 creates carries a prefix private to the run (`rsmb<pid>_`), and the
//! service names the leader's process id, so runs never meet each other or stale state.

use std::process::{Child, Command, ExitCode};
use std::time::{Duration, Instant};

use iceoryx2::prelude::*;

/// No wait for an answer lasts longer: a lost answer ends the run, never hangs it.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);
/// The echoing process ends by itself after this, whatever became of the leader.
const FOLLOWER_LIFETIME: Duration = Duration::from_secs(300);
/// The value (pubsub) or event id (event) that tells the echoing process to end.
const STOP: u64 = u64::MAX;
const STOP_EVENT: usize = 7;

type Error = Box<dyn std::error::Error>;

struct Args {
    test: String,
    iters: usize,
    warmup: usize,
    /// `Some(leader pid)` in the echoing process.
    follow: Option<u32>,
}

fn parse_args() -> Result<Args, Error> {
    let mut args = Args {
        test: String::new(),
        iters: 100_000,
        warmup: 1_000,
        follow: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--test" => args.test = value()?,
            "--iters" => args.iters = value()?.parse()?,
            "--warmup" => args.warmup = value()?.parse()?,
            "--follow" => args.follow = Some(value()?.parse()?),
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    if !matches!(args.test.as_str(), "pubsub" | "event") {
        return Err("--test pubsub|event".into());
    }
    if args.iters == 0 {
        return Err("--iters must be at least 1".into());
    }
    Ok(args)
}

/// The node of a run whose leader is `leader`: its files carry the run's own prefix.
fn node(leader: u32) -> Result<Node<ipc::Service>, Error> {
    let mut config = Config::default();
    config.global.prefix = FileName::new(format!("rsmb{leader}_").as_bytes())?;
    Ok(NodeBuilder::new()
        .config(&config)
        .create::<ipc::Service>()?)
}

fn service_name(leader: u32, what: &str) -> Result<ServiceName, Error> {
    Ok(format!("rsm-bench/{leader}/{what}").as_str().try_into()?)
}

fn main() -> ExitCode {
    set_log_level(LogLevel::Error);
    let result = parse_args().and_then(|args| match (args.follow, args.test.as_str()) {
        (Some(leader), "pubsub") => follow_pubsub(leader),
        (Some(leader), _) => follow_event(leader),
        (None, _) => {
            let led = lead(&args);
            remove_leftovers(std::process::id());
            led
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rsm-anchor-iceoryx2: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Ends the echoing process when the leader could not stop it.
struct Reaper(Child);

impl Drop for Reaper {
    fn drop(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn lead(args: &Args) -> Result<(), Error> {
    let me = std::process::id();
    let node = node(me)?;
    let spawn = || -> Result<Reaper, Error> {
        let child = Command::new(std::env::current_exe()?)
            .args(["--test", &args.test, "--follow", &me.to_string()])
            .spawn()?;
        Ok(Reaper(child))
    };
    let mut samples = vec![0u64; args.iters];
    match args.test.as_str() {
        "pubsub" => {
            let ping = node
                .service_builder(&service_name(me, "ping")?)
                .publish_subscribe::<u64>()
                .open_or_create()?;
            let pong = node
                .service_builder(&service_name(me, "pong")?)
                .publish_subscribe::<u64>()
                .open_or_create()?;
            let publisher = ping.publisher_builder().create()?;
            let subscriber = pong.subscriber_builder().create()?;
            let _follower = spawn()?;
            // Hello until the echo answers: a sample sent before its subscriber exists is lost.
            let deadline = Instant::now() + ANSWER_TIMEOUT;
            'hello: loop {
                publisher.send_copy(0)?;
                let until = Instant::now() + Duration::from_millis(5);
                while Instant::now() < until {
                    if subscriber.receive()?.is_some() {
                        break 'hello;
                    }
                }
                if Instant::now() > deadline {
                    return Err("no echo from the subscriber process".into());
                }
            }
            std::thread::sleep(Duration::from_millis(20));
            while subscriber.receive()?.is_some() {}
            let one = |value: u64| -> Result<u64, Error> {
                let start = Instant::now();
                publisher.send_copy(value)?;
                loop {
                    if let Some(sample) = subscriber.receive()? {
                        if *sample == value {
                            return Ok(start.elapsed().as_nanos() as u64);
                        }
                    } else if start.elapsed() > ANSWER_TIMEOUT {
                        return Err(format!("no answer to {value}").into());
                    }
                }
            };
            for i in 0..args.warmup {
                one(i as u64 + 1)?;
            }
            for (i, slot) in samples.iter_mut().enumerate() {
                *slot = one((args.warmup + i) as u64 + 1)?;
            }
            publisher.send_copy(STOP)?;
        }
        _ => {
            let ping = node
                .service_builder(&service_name(me, "ev-ping")?)
                .event()
                .open_or_create()?;
            let pong = node
                .service_builder(&service_name(me, "ev-pong")?)
                .event()
                .open_or_create()?;
            let notifier = ping.notifier_builder().create()?;
            let listener = pong.listener_builder().create()?;
            let _follower = spawn()?;
            let deadline = Instant::now() + ANSWER_TIMEOUT;
            loop {
                notifier.notify()?;
                if listener.timed_wait(|_| {}, Duration::from_millis(5))? > 0 {
                    break;
                }
                if Instant::now() > deadline {
                    return Err("no answer from the listener process".into());
                }
            }
            std::thread::sleep(Duration::from_millis(20));
            listener.try_wait(|_| {})?;
            let one = || -> Result<u64, Error> {
                let start = Instant::now();
                notifier.notify()?;
                if listener.timed_wait(|_| {}, ANSWER_TIMEOUT)? == 0 {
                    return Err("no answering event".into());
                }
                Ok(start.elapsed().as_nanos() as u64)
            };
            for _ in 0..args.warmup {
                one()?;
            }
            for slot in samples.iter_mut() {
                *slot = one()?;
            }
            notifier.notify_with_custom_event_id(EventId::new(STOP_EVENT))?;
        }
    }
    samples.sort_unstable();
    let at = |p: f64| {
        // Nearest rank, not moved up one by the rounding of p/100 · n.
        let exact = (p / 100.0) * samples.len() as f64;
        let rank = (exact - exact * 1e-12).ceil() as usize;
        samples[rank.clamp(1, samples.len()) - 1] as f64 / 1e3
    };
    println!(
        "{{\"test\":\"{}\",\"samples\":{},\"median_us\":{:.3},\"p99_us\":{:.3},\"p999_us\":{:.3},\"min_us\":{:.3}}}",
        args.test,
        samples.len(),
        at(50.0),
        at(99.0),
        at(99.9),
        samples[0] as f64 / 1e3
    );
    Ok(())
}

/// Removes what the run's nodes left in /dev/shm (iceoryx2 keeps a management segment per
/// prefix): only the names with this run's own prefix.
fn remove_leftovers(leader: u32) {
    let prefix = format!("rsmb{leader}_");
    let Ok(entries) = std::fs::read_dir("/dev/shm") else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Whether the echoing process should end: its time is up or its leader is gone.
fn orphaned(started: Instant, leader: u32) -> bool {
    started.elapsed() > FOLLOWER_LIFETIME || std::os::unix::process::parent_id() != leader
}

fn follow_pubsub(leader: u32) -> Result<(), Error> {
    let node = node(leader)?;
    let ping = node
        .service_builder(&service_name(leader, "ping")?)
        .publish_subscribe::<u64>()
        .open_or_create()?;
    let pong = node
        .service_builder(&service_name(leader, "pong")?)
        .publish_subscribe::<u64>()
        .open_or_create()?;
    let subscriber = ping.subscriber_builder().create()?;
    let publisher = pong.publisher_builder().create()?;
    let started = Instant::now();
    let mut spins = 0u32;
    loop {
        if let Some(sample) = subscriber.receive()? {
            let value = *sample;
            if value == STOP {
                return Ok(());
            }
            publisher.send_copy(value)?;
        } else {
            spins = spins.wrapping_add(1);
            if spins % 4096 == 0 && orphaned(started, leader) {
                return Ok(());
            }
        }
    }
}

fn follow_event(leader: u32) -> Result<(), Error> {
    let node = node(leader)?;
    let ping = node
        .service_builder(&service_name(leader, "ev-ping")?)
        .event()
        .open_or_create()?;
    let pong = node
        .service_builder(&service_name(leader, "ev-pong")?)
        .event()
        .open_or_create()?;
    let listener = ping.listener_builder().create()?;
    let notifier = pong.notifier_builder().create()?;
    let started = Instant::now();
    loop {
        let mut stop = false;
        let n = listener.timed_wait(
            |a| stop |= a.id.as_value() == STOP_EVENT,
            Duration::from_secs(1),
        )?;
        if stop || orphaned(started, leader) {
            return Ok(());
        }
        if n > 0 {
            notifier.notify()?;
        }
    }
}
