//! `rsm_get_segmentid_range` against real files: success and every error, and the
//! `RSM_SEGMENTID_FILE` variable, which is only ever set for a child process.

use std::io::Write;
use std::path::Path;
use std::process::Command;

use rsm::SegmentIdRange;
use rsm::test_util::segid::{DEFAULT_SEGMENTID_FILE, SEGMENTID_FILE_ENV, get_segmentid_range_from};

/// Set in a child process: which check the re-executed test should run.
const CHILD_MODE_ENV: &str = "RSM_SEGID_TEST_CHILD";
/// Printed by a child whose check ran, so the parent knows the filter found the test.
const CHILD_DONE: &str = "segid-child-check-done";

const GOOD: &str = "\
#keyword     appid    baseid    length
reserved     SUNWfoo  0x600000  1000   # the manual's example

RESERVE      mpi      400000    64
";

fn write_file(contents: &[u8]) -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().expect("create a temporary file");
    file.write_all(contents).expect("write the temporary file");
    file.flush().expect("flush the temporary file");
    file
}

fn range(appid: &str, base: u32, length: u32) -> SegmentIdRange {
    SegmentIdRange {
        appid: appid.to_owned(),
        base,
        length,
    }
}

fn lookup_err(path: &Path, appid: &str) -> rsm::Error {
    get_segmentid_range_from(path, appid).expect_err("the lookup should fail")
}

#[test]
fn finds_entries_ignoring_case() {
    let file = write_file(GOOD.as_bytes());
    let found = get_segmentid_range_from(file.path(), "sunwfoo").unwrap();
    assert_eq!(found, range("SUNWfoo", 0x600000, 1000));
    assert_eq!(
        get_segmentid_range_from(file.path(), "MPI").unwrap(),
        range("mpi", 0x400000, 64)
    );
}

#[test]
fn unknown_appid_is_bad_appid() {
    let file = write_file(GOOD.as_bytes());
    let e = lookup_err(file.path(), "SUNWbar");
    assert_eq!(e.code(), 43);
    let s = e.to_string();
    assert!(
        s.contains("\"SUNWbar\"") && s.contains(&file.path().display().to_string()),
        "{s}"
    );
}

#[test]
fn empty_appid_is_bad_addr() {
    let file = write_file(GOOD.as_bytes());
    assert_eq!(lookup_err(file.path(), "").code(), 16);
    assert_eq!(
        lookup_err(Path::new("/nonexistent/rsm.segmentid"), "").code(),
        16
    );
}

#[test]
fn bad_line_is_bad_conf_with_path_and_line() {
    let file = write_file(format!("{GOOD}reserved broken 0x600000 0\n").as_bytes());
    let e = lookup_err(file.path(), "SUNWfoo");
    assert_eq!(e.code(), 44);
    let expected = format!("{} line 5: length 0 is empty", file.path().display());
    assert!(e.to_string().contains(&expected), "{e}");
}

#[test]
fn missing_file_is_bad_conf_naming_it() {
    let dir = tempfile::tempdir().expect("create a temporary directory");
    let path = dir.path().join("rsm.segmentid");
    let e = lookup_err(&path, "SUNWfoo");
    assert_eq!(e.code(), 44);
    let s = e.to_string();
    assert!(
        s.contains(&path.display().to_string()) && s.contains("os error 2"),
        "{s}"
    );
}

#[test]
fn directory_is_bad_conf() {
    let dir = tempfile::tempdir().expect("create a temporary directory");
    let e = lookup_err(dir.path(), "SUNWfoo");
    assert_eq!(e.code(), 44);
    assert!(
        e.to_string().contains(&dir.path().display().to_string()),
        "{e}"
    );
}

#[test]
fn non_utf8_is_bad_conf_with_line() {
    let file = write_file(b"# fine\nreserved app\xff 0x400000 1\n");
    let e = lookup_err(file.path(), "app");
    assert_eq!(e.code(), 44);
    let expected = format!("{} line 2: not UTF-8 text", file.path().display());
    assert!(e.to_string().contains(&expected), "{e}");
}

#[test]
fn oversized_file_is_bad_conf() {
    let mut contents = GOOD.as_bytes().to_vec();
    contents.resize(rsm::test_util::segid::MAX_FILE_BYTES + 1, b'\n');
    let file = write_file(&contents);
    let e = lookup_err(file.path(), "SUNWfoo");
    assert_eq!(e.code(), 44);
    assert!(e.to_string().contains("larger than 1048576 bytes"), "{e}");

    // Exactly at the limit is still read.
    contents.truncate(rsm::test_util::segid::MAX_FILE_BYTES);
    let file = write_file(&contents);
    assert_eq!(
        get_segmentid_range_from(file.path(), "SUNWfoo")
            .unwrap()
            .base,
        0x600000
    );
}

/// Runs this test binary again for test `name` only, with `mode` and extra environment, and
/// checks that the child's check ran and passed.
fn run_child(name: &str, mode: &str, file: Option<&Path>) {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut child = Command::new(exe);
    child
        .args(["--exact", name, "--nocapture"])
        .env(CHILD_MODE_ENV, mode);
    match file {
        Some(path) => child.env(SEGMENTID_FILE_ENV, path),
        None => child.env_remove(SEGMENTID_FILE_ENV),
    };
    let out = child.output().expect("run the test binary");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "child failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stdout.contains(CHILD_DONE),
        "child check did not run\nstdout:\n{stdout}"
    );
}

/// In the child: the variable names the file the parent wrote.
fn child_reads_env_file() {
    let path = std::env::var(SEGMENTID_FILE_ENV).expect("the parent sets the variable");
    assert_eq!(
        rsm::get_segmentid_range("SUNWFOO").unwrap(),
        range("SUNWfoo", 0x600000, 1000)
    );
    let e = rsm::get_segmentid_range("absent").unwrap_err();
    assert_eq!(e.code(), 43);
    assert!(e.to_string().contains(&path), "{e}");
}

/// In the child: the variable names a file that does not exist.
fn child_reports_missing_env_file() {
    let path = std::env::var(SEGMENTID_FILE_ENV).expect("the parent sets the variable");
    let e = rsm::get_segmentid_range("SUNWfoo").unwrap_err();
    assert_eq!(e.code(), 44);
    assert!(e.to_string().contains(&path), "{e}");
}

/// In the child: without the variable the default path is read. Whether it exists is up to
/// the host, so only its absence can be checked.
fn child_uses_default_path() {
    let result = rsm::get_segmentid_range("SUNWfoo");
    if !Path::new(DEFAULT_SEGMENTID_FILE).exists() {
        let e = result.unwrap_err();
        assert_eq!(e.code(), 44);
        assert!(e.to_string().contains(DEFAULT_SEGMENTID_FILE), "{e}");
    }
}

#[test]
fn get_segmentid_range_reads_the_env_file() {
    const NAME: &str = "get_segmentid_range_reads_the_env_file";
    match std::env::var(CHILD_MODE_ENV).as_deref() {
        Ok("file") => child_reads_env_file(),
        Ok("missing") => child_reports_missing_env_file(),
        Ok("default") => child_uses_default_path(),
        Ok(other) => panic!("unknown child mode {other:?}"),
        Err(_) => {
            let file = write_file(GOOD.as_bytes());
            run_child(NAME, "file", Some(file.path()));
            let dir = tempfile::tempdir().expect("create a temporary directory");
            run_child(NAME, "missing", Some(&dir.path().join("absent.segmentid")));
            run_child(NAME, "default", None);
            return;
        }
    }
    println!("{CHILD_DONE}");
}
