//! `rsm demo`: a walk-through of the RSMAPI model with two nodes in two processes, printed
//! step by step for someone who meets `rsm` for the first time.
//!
//! This process plays three importing nodes: the importer (read-write in the segment's access
//! list), a reader (read-only in it) and a stranger (not in it). It re-executes its own binary
//! as `rsm demo-exporter`, the exporting node, pinned to loopback, and drives it over the
//! child's standard input and output: one command, one answer line (`ok [text]` or
//! `err <RSMERR_NAME> <detail>`). The child is always ended and reaped, also when a step fails
//! or this process panics.

use clap::Args;
use futures::StreamExt;
use rsm::{
    Access, Controller, Error, ExportFlags, ExportSegment, ImportSegment, Node, Perm, SignalFlags,
};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ExitCode, Stdio};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// How long the exporter or a local call may take to answer before the demo gives up.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the exporter gets to close its node after `quit` before it is killed.
const QUIT_GRACE: Duration = Duration::from_secs(5);

/// The importer's access in the segment's access list: read and write for everyone of the
/// exporter's user (both processes run as the same user, so the owner bits apply).
const IMPORTER_PERM: u32 = 0o666;
/// The reader's access: read only.
const READER_PERM: u32 = 0o444;

/// The arguments of `rsm demo`.
#[derive(Debug, Clone, Args)]
pub(crate) struct DemoArgs {
    /// The controller both nodes use: `tcp0`, `shm0`, `sockets0`, ...
    #[arg(long, default_value = "tcp0")]
    pub(crate) controller: String,
}

/// The arguments of the hidden `rsm demo-exporter`, which `rsm demo` starts.
#[derive(Debug, Clone, Args)]
pub(crate) struct ExporterArgs {
    /// The controller to export on.
    #[arg(long)]
    pub(crate) controller: String,
    /// This node's id.
    #[arg(long)]
    pub(crate) node: u32,
    /// The node the access list lets read and write.
    #[arg(long)]
    pub(crate) importer: u32,
    /// The node the access list lets read only.
    #[arg(long)]
    pub(crate) reader: u32,
}

/// The node ids of one demo. Nodes of one host find each other by id, so the ids derive
/// from this process's id: two demos, or a demo and the tests, do not meet.
#[derive(Debug, Clone, Copy)]
struct Ids {
    exporter: u32,
    importer: u32,
    reader: u32,
    stranger: u32,
}

impl Ids {
    fn pick() -> Ids {
        let base = 10 * (1000 + std::process::id() % 9000);
        Ids {
            exporter: base + 1,
            importer: base + 2,
            reader: base + 3,
            stranger: base + 4,
        }
    }
}

/// What a step failed with: the RSMAPI error name and what went wrong in words.
#[derive(Debug, Clone)]
struct Failure {
    name: String,
    detail: String,
}

impl From<&Error> for Failure {
    fn from(e: &Error) -> Failure {
        Failure {
            name: e.name().to_string(),
            detail: e
                .context()
                .detail
                .clone()
                .unwrap_or_else(|| e.text().into()),
        }
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        Failure::from(&e)
    }
}

/// What a step came back with: on success, the words to print.
type Outcome = std::result::Result<String, Failure>;

/// What a step should come back with.
enum Expect {
    /// Success, whatever it says.
    Ok,
    /// Success with exactly these words (data read back).
    Text(String),
    /// This RSMAPI error.
    Err(&'static str),
}

/// Why the walk-through cannot go on.
struct Stop(String);

/// The steps taken so far, and those that did not behave as expected.
#[derive(Default)]
struct Walk {
    steps: usize,
    unexpected: Vec<usize>,
}

impl Walk {
    /// Prints the next step: who does what, and which RSMAPI function that is.
    fn begin(&mut self, who: &str, what: &str, rsmapi: &str) {
        self.steps += 1;
        println!();
        print!(
            "{}",
            wrap(&format!("{:>2}. {who}: {what}", self.steps), "    ")
        );
        if !rsmapi.is_empty() {
            println!("    ({rsmapi})");
        }
    }

    /// Prints what came back and whether it was expected; returns whether it was.
    fn end(&mut self, got: &Outcome, expect: Expect) -> bool {
        match got {
            Ok(text) if text.is_empty() => println!("    -> ok"),
            Ok(text) => println!("    -> ok: {text}"),
            Err(f) => println!("    -> {}: {}", f.name, f.detail),
        }
        let expected = match (got, &expect) {
            (Ok(_), Expect::Ok) => true,
            (Ok(text), Expect::Text(want)) => text == want,
            (Err(f), Expect::Err(name)) => f.name == *name,
            _ => false,
        };
        if expected {
            if let Expect::Err(_) = expect {
                println!("       as expected");
            }
        } else {
            self.unexpected.push(self.steps);
            match expect {
                Expect::Ok => println!("    !! NOT AS EXPECTED: this should have succeeded"),
                Expect::Text(want) => {
                    println!("    !! NOT AS EXPECTED: {want} should have come back")
                }
                Expect::Err(name) => {
                    println!("    !! NOT AS EXPECTED: {name} should have come back")
                }
            }
        }
        expected
    }

    fn stop(&self, why: impl Into<String>) -> Stop {
        Stop(format!("stopped after step {}: {}", self.steps, why.into()))
    }
}

/// Runs a local call with the demo's timeout.
async fn within<T>(fut: impl Future<Output = rsm::Result<T>>) -> std::result::Result<T, Failure> {
    match tokio::time::timeout(ANSWER_TIMEOUT, fut).await {
        Ok(res) => res.map_err(Failure::from),
        Err(_) => Err(Failure {
            name: "timeout".into(),
            detail: format!("no answer within {} s", ANSWER_TIMEOUT.as_secs()),
        }),
    }
}

/// Runs `rsm demo`: 0 when every step behaved as expected, 1 when one did not, 2 when the
/// walk-through could not go on.
pub(crate) async fn run(args: DemoArgs) -> ExitCode {
    let ids = Ids::pick();
    let mut exporter = match ExporterProcess::spawn(&args.controller, ids) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("rsm demo: cannot start the exporter process: {e}");
            return ExitCode::from(2);
        }
    };
    println!(
        "rsm demo: remote shared memory between two processes on controller {}",
        args.controller
    );
    println!();
    println!(
        "  node {:<6} the exporter: a second process (pid {}) that offers a segment of memory",
        ids.exporter,
        exporter.pid()
    );
    println!(
        "  node {:<6} the importer: this process; the access list lets it read and write",
        ids.importer
    );
    println!(
        "  node {:<6} a reader: also this process; the access list lets it only read",
        ids.reader
    );
    println!(
        "  node {:<6} a stranger: also this process; the access list does not name it",
        ids.stranger
    );

    println!();
    println!(
        "Each step names the RSMAPI function it stands for and shows what came back; some steps"
    );
    println!("must be refused, and say so.");

    let mut walk = Walk::default();
    let mut nodes = Vec::new();
    let result = walk_through(&args.controller, ids, &mut exporter, &mut walk, &mut nodes).await;
    for node in nodes {
        node.shutdown().await;
    }
    let ended = exporter.finish().await;
    println!();
    println!("The exporter process {ended}.");
    match result {
        Err(Stop(why)) => {
            println!("rsm demo: {why}");
            ExitCode::from(2)
        }
        Ok(()) if walk.unexpected.is_empty() => {
            println!("rsm demo: all {} steps behaved as expected.", walk.steps);
            ExitCode::SUCCESS
        }
        Ok(()) => {
            let list: Vec<String> = walk.unexpected.iter().map(|n| n.to_string()).collect();
            println!(
                "rsm demo: {} of {} steps did not behave as expected: {}.",
                walk.unexpected.len(),
                walk.steps,
                list.join(", ")
            );
            ExitCode::from(1)
        }
    }
}

/// Starts a node in this process and opens `controller` on it.
async fn start_node(id: u32, controller: &str, nodes: &mut Vec<Node>) -> rsm::Result<Controller> {
    let node = Node::builder().ignore_environment().id(id).start().await?;
    nodes.push(node.clone());
    node.controller(controller).await
}

/// Connects `ctrl` to the exporter's segment and describes what was granted.
async fn connect(
    ctrl: &std::result::Result<Controller, Failure>,
    ids: Ids,
    segment: u32,
    perm: Perm,
) -> (Outcome, Option<ImportSegment>) {
    let ctrl = match ctrl {
        Ok(c) => c,
        Err(f) => return (Err(f.clone()), None),
    };
    match within(ctrl.import(rsm::NodeId(ids.exporter), rsm::SegmentId(segment), perm)).await {
        Ok(imp) => (
            Ok(format!(
                "connected, granted {}, the segment has {} bytes",
                perm_words(imp.perm()),
                imp.len()
            )),
            Some(imp),
        ),
        Err(f) => (Err(f), None),
    }
}

fn perm_words(p: Perm) -> String {
    let words = if p == Perm::RDWR {
        "read-write"
    } else if p == Perm::READ {
        "read-only"
    } else if p == Perm::WRITE {
        "write-only"
    } else {
        "no access"
    };
    format!("{words} ({:04o})", p.bits())
}

/// Writes `text` at offset 0 through `imp`.
async fn put_text(imp: &ImportSegment, text: &str) -> Outcome {
    let put = async { Ok(imp.put(0, text.as_bytes().to_vec()).await?) };
    let (n, _buf) = within(put).await?;
    Ok(format!("{n} bytes written"))
}

/// Reads `len` bytes at offset 0 through `imp`, as quoted text.
async fn get_text(imp: &ImportSegment, len: usize) -> Outcome {
    let get = async { Ok(imp.get(0, vec![0u8; len]).await?) };
    let (_, buf) = within(get).await?;
    Ok(quoted(&buf))
}

fn quoted(bytes: &[u8]) -> String {
    format!("{:?}", String::from_utf8_lossy(bytes))
}

/// Quietly ends a connection that should not have been made.
async fn drop_import(imp: Option<ImportSegment>) {
    if let Some(imp) = imp {
        let _ = within(imp.disconnect()).await;
    }
}

async fn walk_through(
    controller: &str,
    ids: Ids,
    exporter: &mut ExporterProcess,
    walk: &mut Walk,
    nodes: &mut Vec<Node>,
) -> std::result::Result<(), Stop> {
    let exp = format!("exporter (node {})", ids.exporter);
    let imp_who = format!("importer (node {})", ids.importer);
    let reader_who = format!("reader (node {})", ids.reader);
    let stranger_who = format!("stranger (node {})", ids.stranger);

    walk.begin(
        &exp,
        &format!("start the node and open controller {controller}"),
        "rsm_get_controller",
    );
    let got = exporter.answer().await.map_err(|e| walk.stop(e))?;
    if !walk.end(&got, Expect::Ok) {
        return Err(walk.stop("the exporter has no node"));
    }

    walk.begin(
        &exp,
        "create an export segment of one page, memory other nodes may read and write",
        "rsm_memseg_export_create",
    );
    let got = exporter
        .ask("export")
        .await
        .map_err(|e| walk.stop(e))?
        .map(|size| format!("{size} bytes"));
    if !walk.end(&got, Expect::Ok) {
        return Err(walk.stop("the exporter has no segment"));
    }

    walk.begin(
        &exp,
        &format!(
            "publish it with an access list: node {} may read and write ({IMPORTER_PERM:04o}), \
             node {} may read ({READER_PERM:04o}), no one else may connect",
            ids.importer, ids.reader
        ),
        "rsm_memseg_export_publish",
    );
    let answer = exporter.ask("publish").await.map_err(|e| walk.stop(e))?;
    let segment: Option<u32> = answer.as_ref().ok().and_then(|id| id.parse().ok());
    let got = answer.map(|_| match segment {
        Some(id) => format!("segment id {id:#x}, chosen by the node"),
        None => "an answer without a segment id".into(),
    });
    let segment = match (walk.end(&got, Expect::Ok), segment) {
        (true, Some(id)) => id,
        _ => return Err(walk.stop("the segment is not published")),
    };

    walk.begin(
        &imp_who,
        &format!(
            "start the node, open {controller}, connect to segment {segment:#x} of node {} \
             asking to read and write",
            ids.exporter
        ),
        "rsm_get_controller, rsm_memseg_import_connect",
    );
    let ctrl = start_node(ids.importer, controller, nodes)
        .await
        .map_err(Failure::from);
    let (got, imp) = connect(&ctrl, ids, segment, Perm::RDWR).await;
    walk.end(&got, Expect::Ok);
    let Some(imp) = imp else {
        return Err(walk.stop("the importer is not connected"));
    };

    let greeting = format!("Hello from node {}!", ids.importer);
    walk.begin(
        &imp_who,
        &format!(
            "put {} at offset 0; it returns once the bytes are in the exporter's memory",
            quoted(greeting.as_bytes())
        ),
        "rsm_memseg_import_put",
    );
    let got = put_text(&imp, &greeting).await;
    walk.end(&got, Expect::Ok);

    walk.begin(
        &exp,
        "look at its own memory at offset 0 (a local read, no RSMAPI call)",
        "",
    );
    let got = exporter
        .ask(&format!("read {}", greeting.len()))
        .await
        .map_err(|e| walk.stop(e))?
        .map(|hex| quoted(&unhex(&hex)));
    walk.end(&got, Expect::Text(quoted(greeting.as_bytes())));

    walk.begin(
        &imp_who,
        &format!("get {} bytes back from offset 0", greeting.len()),
        "rsm_memseg_import_get",
    );
    let got = get_text(&imp, greeting.len()).await;
    walk.end(&got, Expect::Text(quoted(greeting.as_bytes())));

    walk.begin(
        &stranger_who,
        &format!(
            "start the node, open {controller}, connect to segment {segment:#x} asking to \
             read; the access list does not name this node"
        ),
        "rsm_memseg_import_connect",
    );
    let ctrl = start_node(ids.stranger, controller, nodes)
        .await
        .map_err(Failure::from);
    let (got, stray) = connect(&ctrl, ids, segment, Perm::READ).await;
    walk.end(&got, Expect::Err("RSMERR_SEG_NOT_PUBLISHED_TO_NODE"));
    drop_import(stray).await;

    walk.begin(
        &reader_who,
        &format!(
            "start the node, open {controller}, connect to segment {segment:#x} asking to \
             read and write; the access list lets this node only read"
        ),
        "rsm_memseg_import_connect",
    );
    let ctrl = start_node(ids.reader, controller, nodes)
        .await
        .map_err(Failure::from);
    let (got, stray) = connect(&ctrl, ids, segment, Perm::RDWR).await;
    walk.end(&got, Expect::Err("RSMERR_PERM_DENIED"));
    drop_import(stray).await;

    walk.begin(
        &reader_who,
        &format!("connect to segment {segment:#x} again, asking to read only"),
        "rsm_memseg_import_connect",
    );
    let (got, reader) = connect(&ctrl, ids, segment, Perm::READ).await;
    walk.end(&got, Expect::Ok);

    if let Some(reader) = &reader {
        walk.begin(
            &reader_who,
            &format!("get {} bytes from offset 0", greeting.len()),
            "rsm_memseg_import_get",
        );
        let got = get_text(reader, greeting.len()).await;
        walk.end(&got, Expect::Text(quoted(greeting.as_bytes())));

        walk.begin(
            &reader_who,
            "put \"Hi!\" at offset 0; the connection is read-only, so the node refuses it \
             itself and sends nothing",
            "rsm_memseg_import_put",
        );
        let got = put_text(reader, "Hi!").await;
        walk.end(&got, Expect::Err("RSMERR_PERM_DENIED"));
    }

    signals_walk(
        &exp,
        &imp_who,
        &reader_who,
        &imp,
        reader.as_ref(),
        exporter,
        walk,
    )
    .await?;
    let mut imp_events = imp.events();

    walk.begin(
        &exp,
        "unpublish the segment: no new connections, and the connected importers are \
         disconnected by force",
        "rsm_memseg_export_unpublish",
    );
    let got = exporter
        .ask("unpublish")
        .await
        .map_err(|e| walk.stop(e))?
        .map(|n| format!("{n} connected importer(s) disconnected"));
    walk.end(&got, Expect::Ok);

    walk.begin(
        &imp_who,
        "put \"Still there?\" at offset 0",
        "rsm_memseg_import_put",
    );
    let got = put_text(&imp, "Still there?").await;
    walk.end(&got, Expect::Err("RSMERR_CONN_ABORTED"));

    walk.begin(
        &imp_who,
        "look at the segment's event stream: the exporter's revoke is there",
        "",
    );
    let got = match tokio::time::timeout(Duration::from_secs(5), imp_events.next()).await {
        Ok(Some(Ok(e))) => Ok(format!("{e:?}")),
        Ok(other) => Ok(format!("{other:?}")),
        Err(_) => Err(Failure {
            name: "timeout".into(),
            detail: "no event within 5 s".into(),
        }),
    };
    walk.end(&got, Expect::Text("Revoked".into()));

    walk.begin(
        &imp_who,
        "disconnect, which also cleans up after a forced disconnect",
        "rsm_memseg_import_disconnect",
    );
    let got = within(imp.disconnect()).await.map(|()| String::new());
    walk.end(&got, Expect::Ok);
    drop_import(reader).await;

    walk.begin(&exp, "destroy the segment", "rsm_memseg_export_destroy");
    let got = exporter.ask("destroy").await.map_err(|e| walk.stop(e))?;
    walk.end(&got, Expect::Ok);
    Ok(())
}

/// The signal steps: posts both ways, waits that consume, a wait that times out, and the
/// exporter's event stream.
async fn signals_walk(
    exp: &str,
    imp_who: &str,
    reader_who: &str,
    imp: &ImportSegment,
    reader: Option<&ImportSegment>,
    exporter: &mut ExporterProcess,
    walk: &mut Walk,
) -> std::result::Result<(), Stop> {
    walk.begin(
        imp_who,
        "signal the exporter: \"a record is there\" (an 8-byte write to the exporter's \
         doorbell whose completion data names the connection)",
        "rsm_intr_signal_post",
    );
    let got = within(imp.signal(SignalFlags::empty()))
        .await
        .map(|()| String::new());
    walk.end(&got, Expect::Ok);

    walk.begin(
        exp,
        "wait for a signal, at most 5 s; the wait consumes it",
        "rsm_intr_signal_wait",
    );
    let got = exporter.ask("wait 5000").await.map_err(|e| walk.stop(e))?;
    walk.end(&got, Expect::Ok);

    if let Some(reader) = reader {
        walk.begin(
            reader_who,
            "signal the exporter too: a read-only connection may signal",
            "rsm_intr_signal_post",
        );
        let got = within(reader.signal(SignalFlags::empty()))
            .await
            .map(|()| String::new());
        walk.end(&got, Expect::Ok);

        walk.begin(exp, "wait for that signal", "rsm_intr_signal_wait");
        let got = exporter.ask("wait 5000").await.map_err(|e| walk.stop(e))?;
        walk.end(&got, Expect::Ok);
    }

    walk.begin(
        exp,
        "wait again, at most 200 ms: every signal was consumed",
        "rsm_intr_signal_wait",
    );
    let got = exporter.ask("wait 200").await.map_err(|e| walk.stop(e))?;
    walk.end(&got, Expect::Err("RSMERR_TIMEOUT"));

    walk.begin(
        exp,
        "signal every importer of the segment",
        "rsm_intr_signal_post",
    );
    let got = exporter.ask("signal").await.map_err(|e| walk.stop(e))?;
    walk.end(&got, Expect::Ok);

    walk.begin(
        imp_who,
        "wait for the exporter's signal",
        "rsm_intr_signal_wait",
    );
    let got = within(imp.wait_signal(Some(Duration::from_secs(5))))
        .await
        .map(|_exporter| String::new());
    walk.end(&got, Expect::Ok);

    walk.begin(
        exp,
        "look at the segment's event stream (a tokio Stream that observes, consuming nothing)",
        "",
    );
    let got = exporter.ask("events").await.map_err(|e| walk.stop(e))?;
    walk.end(&got, Expect::Ok);
    Ok(())
}

/// `text` broken into lines of at most 92 columns, the later ones indented by `indent`.
fn wrap(text: &str, indent: &str) -> String {
    const WIDTH: usize = 92;
    let mut out = String::new();
    let mut line = String::new();
    for (i, word) in text.split(' ').enumerate() {
        if i == 0 {
            line.push_str(word);
        } else if line.len() + 1 + word.len() > WIDTH && !line.trim().is_empty() {
            out.push_str(&line);
            out.push('\n');
            line = format!("{indent}{word}");
        } else {
            line.push(' ');
            line.push_str(word);
        }
    }
    out.push_str(&line);
    out.push('\n');
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len() / 2)
        .filter_map(|i| u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok())
        .collect()
}

/// The running `rsm demo-exporter`. Dropping it kills and reaps the child; [`finish`] asks it
/// to quit first.
///
/// [`finish`]: ExporterProcess::finish
struct ExporterProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::UnboundedReceiver<String>,
    reaped: bool,
}

impl ExporterProcess {
    /// Starts `<this executable> demo-exporter ...` with the providers pinned to loopback
    /// (in the child's environment only).
    fn spawn(controller: &str, ids: Ids) -> std::io::Result<ExporterProcess> {
        let exe = std::env::current_exe()?;
        let mut child = std::process::Command::new(exe)
            .args(["demo-exporter", "--controller", controller])
            .args(["--node", &ids.exporter.to_string()])
            .args(["--importer", &ids.importer.to_string()])
            .args(["--reader", &ids.reader.to_string()])
            .env("FI_TCP_IFACE", "lo")
            .env("FI_SOCKETS_IFACE", "lo")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let (tx, lines) = mpsc::unbounded_channel();
        // From here on the guard owns the child: an early return kills and reaps it.
        let process = ExporterProcess {
            child,
            stdin,
            lines,
            reaped: false,
        };
        let stdout = stdout.ok_or_else(|| std::io::Error::other("no pipe from the exporter"))?;
        std::thread::Builder::new()
            .name("rsm-demo-exporter-out".into())
            .spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            })?;
        Ok(process)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exporter's next answer line.
    async fn answer(&mut self) -> std::result::Result<Outcome, String> {
        match tokio::time::timeout(ANSWER_TIMEOUT, self.lines.recv()).await {
            Ok(Some(line)) => Ok(parse_answer(&line)),
            Ok(None) => Err("the exporter process ended (its messages are above)".into()),
            Err(_) => Err(format!(
                "the exporter did not answer within {} s",
                ANSWER_TIMEOUT.as_secs()
            )),
        }
    }

    /// Sends one command and returns the answer.
    async fn ask(&mut self, command: &str) -> std::result::Result<Outcome, String> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or("the exporter's input is closed")?;
        writeln!(stdin, "{command}")
            .and_then(|()| stdin.flush())
            .map_err(|e| format!("cannot send {command:?} to the exporter: {e}"))?;
        self.answer().await
    }

    /// Asks the exporter to quit, gives it a little time to close its node, kills it if it
    /// is still running, and reaps it. Returns how it ended, in words.
    async fn finish(mut self) -> String {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = writeln!(stdin, "quit").and_then(|()| stdin.flush());
            // Dropping the pipe is a second way of asking.
        }
        let deadline = Instant::now() + QUIT_GRACE;
        while Instant::now() < deadline {
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    self.reaped = true;
                    return format!("ended ({status})");
                }
                Ok(None) => tokio::time::sleep(Duration::from_millis(20)).await,
                Err(_) => break,
            }
        }
        self.kill_and_reap();
        format!(
            "did not quit within {} s and was killed",
            QUIT_GRACE.as_secs()
        )
    }

    fn kill_and_reap(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.reaped = true;
        remove_shm_files(self.child.id());
    }
}

impl Drop for ExporterProcess {
    fn drop(&mut self) {
        if !self.reaped {
            self.kill_and_reap();
        }
    }
}

/// libfabric's shm provider names its regions `/dev/shm/<pid>:...`; a killed process cannot
/// remove its own.
fn remove_shm_files(pid: u32) {
    let prefix = format!("{pid}:");
    if let Ok(dir) = std::fs::read_dir("/dev/shm") {
        for entry in dir.flatten() {
            if entry.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

/// `ok [text]` or `err <NAME> <detail>`.
fn parse_answer(line: &str) -> Outcome {
    if let Some(rest) = line.strip_prefix("err ") {
        let (name, detail) = rest.split_once(' ').unwrap_or((rest, ""));
        return Err(Failure {
            name: name.to_string(),
            detail: detail.to_string(),
        });
    }
    match line.strip_prefix("ok") {
        Some(text) => Ok(text.trim_start().to_string()),
        None => Err(Failure {
            name: "garbled".into(),
            detail: format!("the exporter said {line:?}"),
        }),
    }
}

/// Prints one answer line to `rsm demo`.
fn say(answer: std::result::Result<String, Error>) {
    match answer {
        Ok(text) if text.is_empty() => println!("ok"),
        Ok(text) => println!("ok {text}"),
        Err(e) => {
            let f = Failure::from(&e);
            println!("err {} {}", f.name, f.detail.replace('\n', " "));
        }
    }
}

/// Runs `rsm demo-exporter`: the exporting node of `rsm demo`, driven over standard input and
/// output. Ends at `quit` or when its input closes.
pub(crate) async fn run_exporter(args: ExporterArgs) -> ExitCode {
    let (tx, mut commands) = mpsc::unbounded_channel::<String>();
    let reader = std::thread::Builder::new()
        .name("rsm-demo-exporter-in".into())
        .spawn(move || {
            for line in std::io::stdin().lock().lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
    if let Err(e) = reader {
        eprintln!("rsm demo-exporter: cannot read the commands: {e}");
        return ExitCode::FAILURE;
    }
    let node = match Node::builder()
        .ignore_environment()
        .id(args.node)
        .start()
        .await
    {
        Ok(node) => node,
        Err(e) => {
            say(Err(e));
            return ExitCode::FAILURE;
        }
    };
    let ctrl = match node.controller(&args.controller).await {
        Ok(c) => c,
        Err(e) => {
            say(Err(e));
            node.shutdown().await;
            return ExitCode::FAILURE;
        }
    };
    say(Ok(format!("node {} on {}", node.id(), ctrl.name())));
    let acl = [
        Access::new(rsm::NodeId(args.importer), IMPORTER_PERM),
        Access::new(rsm::NodeId(args.reader), READER_PERM),
    ];
    let mut seg: Option<ExportSegment> = None;
    let events: std::sync::Arc<std::sync::Mutex<Vec<String>>> = Default::default();
    let no_segment = || Error::bad_seg_hndl().detail("no segment was created");
    while let Some(command) = commands.recv().await {
        let words: Vec<&str> = command.split_whitespace().collect();
        let answer = match words.as_slice() {
            ["export"] => ctrl
                .export(ctrl.attr().page_size as usize, ExportFlags::empty())
                .map(|s| {
                    let size = s.size();
                    seg = Some(s);
                    size.to_string()
                }),
            ["publish"] => match &seg {
                Some(s) => {
                    let mut stream = s.events();
                    let log = std::sync::Arc::clone(&events);
                    tokio::spawn(async move {
                        while let Some(e) = stream.next().await {
                            let line = match e {
                                Ok(e) => format!("{e:?}"),
                                Err(lagged) => lagged.to_string(),
                            };
                            log.lock().unwrap_or_else(|p| p.into_inner()).push(line);
                        }
                    });
                    s.publish(None, &acl).await.map(|id| id.get().to_string())
                }
                None => Err(no_segment()),
            },
            ["wait", ms] => match (&seg, ms.parse::<u64>()) {
                (Some(s), Ok(ms)) => {
                    s.wait_signal(Some(Duration::from_millis(ms)))
                        .await
                        .map(|who| {
                            format!(
                                "one signal consumed (from node {}), {} pending",
                                who.node(),
                                s.pending_signals()
                            )
                        })
                }
                (None, _) => Err(no_segment()),
                (_, Err(_)) => Err(Error::bad_conf().detail(format!("bad timeout {ms:?}"))),
            },
            ["signal"] => match &seg {
                Some(s) => s
                    .signal(SignalFlags::empty())
                    .await
                    .map(|()| format!("{} importer(s) signalled", s.importer_count())),
                None => Err(no_segment()),
            },
            ["events"] => Ok(events.lock().unwrap_or_else(|p| p.into_inner()).join(", ")),
            ["read", len] => match (&seg, len.parse::<usize>()) {
                (Some(s), Ok(len)) => {
                    let mut buf = vec![0u8; len];
                    s.read_at(0, &mut buf).map(|()| hex(&buf))
                }
                (None, _) => Err(no_segment()),
                (_, Err(_)) => Err(Error::bad_length().detail(format!("bad length {len:?}"))),
            },
            ["unpublish"] => match &seg {
                Some(s) => {
                    let importers = s.importer_count();
                    s.unpublish().await.map(|()| importers.to_string())
                }
                None => Err(no_segment()),
            },
            ["destroy"] => match seg.take() {
                Some(s) => s.destroy().await.map(|()| String::new()),
                None => Err(no_segment()),
            },
            ["quit"] | [] => break,
            _ => Err(Error::bad_conf().detail(format!("unknown command {command:?}"))),
        };
        say(answer);
    }
    if let Some(s) = seg.take() {
        let _ = s.destroy().await;
    }
    drop(ctrl);
    node.shutdown().await;
    ExitCode::SUCCESS
}
