//! The C library as C programs see it: the headers compile cleanly in C99, C11 and C++; the
//! library exports exactly the 42 RSMAPI functions; the structures match; and the C test
//! programs (`tests/c/`) and the example (`examples/c/rsm_hello.c`) run as exporter and
//! importer processes on `loopback`, `tcp0` and `shm0` (docs/rsmapi.md §4, DESIGN.md §12); a C
//! program's signal handlers stay its own (DESIGN.md §3.1).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock, mpsc};
use std::time::Duration;

/// The crate's directory.
fn here() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The cargo profile directory the tests run from (`target/debug`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>")
        .to_path_buf()
}

/// A directory holding `librsm.so` and `librsm.so.2` (the built cdylib under its C names),
/// copied once per test binary: a copy over a library a running program uses would crash it.
fn lib_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = profile_dir().join(format!("capi-test-lib-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("lib dir");
        let built = profile_dir().join("librsm_capi.so");
        assert!(
            built.exists(),
            "{} was not built: `cargo build -p rsm-capi` (`cargo xtask test` does)",
            built.display()
        );
        for name in ["librsm.so", "librsm.so.2"] {
            std::fs::copy(&built, dir.join(name)).expect("copy the library");
        }
        dir
    })
    .clone()
}

/// One multi-process test at a time: two cores, and each C program starts a node.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

fn cc() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".into())
}

/// Compiles `sources` into `out` with the headers and `-lrsm`, warnings as errors.
fn compile(compiler: &str, flags: &[&str], sources: &[PathBuf], out: &Path) {
    let lib = lib_dir();
    let status = Command::new(compiler)
        .args(flags)
        .args(["-Wall", "-Wextra", "-Werror", "-I"])
        .arg(here().join("include"))
        .args(sources)
        .arg("-o")
        .arg(out)
        .arg(format!("-L{}", lib.display()))
        .arg("-lrsm")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .status()
        .expect("run the C compiler");
    assert!(status.success(), "{compiler} {flags:?} {sources:?} failed");
}

/// A C test program, built for this test binary (under its pid, so that no other binary's
/// build replaces it while it runs).
fn program(name: &str) -> PathBuf {
    let out = profile_dir().join(format!("capi-test-{name}-{}", std::process::id()));
    let src = match name {
        "rsm_hello" => here().join("../examples/c/rsm_hello.c"),
        _ => here().join(format!("tests/c/{name}.c")),
    };
    compile(
        &cc(),
        &["-std=c99", "-D_POSIX_C_SOURCE=200809L"],
        &[src],
        &out,
    );
    out
}

/// A running C program; killed and reaped on drop, whatever the test's outcome.
struct Proc {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Proc {
    fn start(exe: &Path, node: u32, args: &[&str], segid_file: &Path) -> Proc {
        let mut cmd = Command::new(exe);
        for var in ["RSM_PEERS", "RSM_LISTEN", "RSM_KEY_FILE", "RSM_TRUST_FILE"] {
            cmd.env_remove(var);
        }
        let mut child = cmd
            .args(args)
            .env("RSM_CONFIG", "")
            .env("RSM_NODE_ID", node.to_string())
            .env("RSM_SEGMENTID_FILE", segid_file)
            .env("FI_TCP_IFACE", "lo")
            .env("FI_SOCKETS_IFACE", "lo")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn a C program");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Proc { child, lines }
    }

    /// The next line the program prints, within 30 s.
    fn line(&mut self) -> String {
        match self.lines.recv_timeout(Duration::from_secs(30)) {
            Ok(line) => line,
            Err(e) => {
                std::thread::sleep(Duration::from_millis(200));
                panic!(
                    "no line from the C program ({e}); exit: {:?}",
                    self.child.try_wait()
                )
            }
        }
    }

    /// Waits (at most 30 s) for a successful exit.
    fn success(mut self) {
        for _ in 0..300 {
            if let Some(status) = self.child.try_wait().expect("wait") {
                assert!(status.success(), "the C program failed: {status}");
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("the C program did not finish");
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Two node ids no other test on this host uses at the same time.
fn node_ids(k: u32) -> (u32, u32) {
    let base = 3_000_000 + (std::process::id() % 100_000) * 10 + 2 * k;
    (base, base + 1)
}

fn segid_file() -> PathBuf {
    let path = profile_dir().join(format!("capi-test-segid-{}", std::process::id()));
    std::fs::write(&path, "# test ranges\nreserved SUNWctest 0x600000 1000\n").expect("segid file");
    path
}

/// One exporter-importer pair: the exporter prints `<ready> <segid>`, then the importer runs
/// with `importer_args(exporter node, segid, importer node)`; each prints `done` lines.
struct Pair<'a> {
    exporter: (&'a Path, &'a [&'a str]),
    importer: &'a Path,
    ready: &'a str,
    k: u32,
}

impl Pair<'_> {
    fn run(&self, importer_args: impl Fn(&str, &str, &str) -> Vec<String>, done: (&str, &str)) {
        let (a, b) = node_ids(self.k);
        let segids = segid_file();
        let mut exp = Proc::start(self.exporter.0, a, self.exporter.1, &segids);
        let line = exp.line();
        let id = line
            .strip_prefix(self.ready)
            .expect("the segment id")
            .to_string();
        let args = importer_args(&a.to_string(), &id, &b.to_string());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut imp = Proc::start(self.importer, b, &args, &segids);
        assert_eq!(imp.line(), done.1, "importer");
        assert_eq!(exp.line(), done.0, "exporter");
        imp.success();
        exp.success();
    }
}

fn exporter_and_importer(ctrl: &str, k: u32) {
    let _serial = serial();
    let (exporter, importer) = (program("exporter"), program("importer"));
    let pair = Pair {
        exporter: (&exporter, &[ctrl]),
        importer: &importer,
        ready: "READY ",
        k,
    };
    let args = |a: &str, id: &str, b: &str| [ctrl, a, id, b].map(String::from).to_vec();
    pair.run(args, ("DONE", "DONE"));
}

#[test]
fn c_programs_on_loopback() {
    exporter_and_importer("loopback", 0);
}

#[test]
fn c_programs_on_tcp0() {
    exporter_and_importer("tcp0", 1);
}

#[test]
fn c_programs_on_shm0() {
    exporter_and_importer("shm0", 2);
}

#[test]
fn the_example_shares_a_segment_and_signals() {
    let _serial = serial();
    let hello = program("rsm_hello");
    let pair = Pair {
        exporter: (&hello, &["export", "loopback"]),
        importer: &hello,
        ready: "segment ",
        k: 3,
    };
    let args =
        |a: &str, id: &str, _: &str| ["import", "loopback", a, id].map(String::from).to_vec();
    pair.run(args, ("got: hello from an RSMAPI program", "sent"));
}

/// A C program's own signal handlers stay in place across `rsm_get_controller` and run when
/// their signals come; the others keep their default action (DESIGN.md §3.1).
fn own_handlers(ctrl: &str, k: u32) {
    let _serial = serial();
    let exe = program("own_handler");
    let (node, _) = node_ids(k);
    let mut p = Proc::start(&exe, node, &[ctrl], &segid_file());
    assert_eq!(p.line(), "HANDLED", "{ctrl}");
    p.success();
}

#[test]
fn a_c_programs_signal_handlers_stay_its_own_on_shm0() {
    own_handlers("shm0", 4);
}

#[test]
fn a_c_programs_signal_handlers_stay_its_own_on_tcp0() {
    own_handlers("tcp0", 5);
}

#[test]
fn headers_compile_cleanly_as_c99_c11_and_cpp() {
    let src = profile_dir().join("capi-test-headers.c");
    std::fs::write(
        &src,
        "#include <rsmapi.h>\nint main(void) { rsm_topology_t *t = 0; (void)t; return RSM_SUCCESS; }\n",
    )
    .expect("write");
    for std in ["-std=c99", "-std=c11"] {
        let out = profile_dir().join("capi-test-headers");
        compile(&cc(), &[std, "-pedantic"], std::slice::from_ref(&src), &out);
    }
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    if Command::new(&cxx).arg("--version").output().is_ok() {
        let cpp = profile_dir().join("capi-test-headers.cpp");
        std::fs::copy(&src, &cpp).expect("copy");
        compile(
            &cxx,
            &["-pedantic"],
            &[cpp],
            &profile_dir().join("capi-test-headers-cxx"),
        );
    }
}

/// The 42 function names `<rsmapi.h>` declares.
fn declared() -> Vec<String> {
    let header = std::fs::read_to_string(here().join("include/rsmapi.h")).expect("rsmapi.h");
    let mut names: Vec<String> = header
        .lines()
        .filter(|l| l.starts_with("int ") || l.starts_with("void "))
        .filter_map(|l| l.split_once('(').map(|(head, _)| head))
        .filter_map(|head| head.split_whitespace().last())
        .map(|n| n.trim_start_matches('*').to_string())
        .collect();
    names.sort();
    names
}

#[test]
fn the_library_exports_exactly_the_42_functions() {
    let names = declared();
    assert_eq!(names.len(), 42, "{names:?}");
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(profile_dir().join("librsm_capi.so"))
        .output()
        .expect("nm");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut exported: Vec<String> = text
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .map(str::to_string)
        .collect();
    exported.sort();
    assert_eq!(exported, names);
    let soname = Command::new("readelf")
        .arg("-d")
        .arg(profile_dir().join("librsm_capi.so"))
        .output()
        .expect("readelf");
    assert!(String::from_utf8_lossy(&soname.stdout).contains("[librsm.so.2]"));
}

#[test]
fn the_rust_structures_match_the_headers() {
    use rsm_capi::ctypes::*;
    use std::mem::{offset_of, size_of};
    let src = profile_dir().join("capi-test-layout.c");
    std::fs::write(
        &src,
        "#include <rsmapi.h>\n#include <stdio.h>\n#include <stddef.h>\n\
         int main(void) { printf(\"%zu %zu %zu %zu %zu %zu %zu %zu %zu %zu %zu\\n\",\n\
         sizeof(rsmapi_controller_attr_t), sizeof(rsmapi_access_entry_t), sizeof(rsmapi_barrier_t),\n\
         sizeof(rsm_iovec_t), sizeof(rsm_scat_gath_t), offsetof(rsm_scat_gath_t, iovec),\n\
         sizeof(rsm_connections_hdr_t), sizeof(rsm_remote_cntlr_t),\n\
         offsetof(rsm_connections_t, remote_cntlr), offsetof(rsm_topology_t, connections),\n\
         offsetof(rsm_remote_cntlr_t, remote_hwaddr)); return 0; }\n",
    )
    .expect("write");
    let exe = profile_dir().join("capi-test-layout");
    compile(&cc(), &["-std=c99"], &[src], &exe);
    let out = Command::new(&exe).output().expect("run");
    let c = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let rust = [
        size_of::<ControllerAttr>(),
        size_of::<AccessEntry>(),
        size_of::<BarrierStorage>(),
        size_of::<Iovec>(),
        size_of::<ScatGath>(),
        offset_of!(ScatGath, iovec),
        size_of::<ConnectionsHdr>(),
        size_of::<RemoteCntlr>(),
        offset_of!(Connections, remote_cntlr),
        offset_of!(Topology, connections),
        offset_of!(RemoteCntlr, remote_hwaddr),
    ]
    .map(|n| n.to_string())
    .join(" ");
    assert_eq!(c, rust);
}
