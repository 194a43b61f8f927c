//! The node's own tests: the builder, the listener, the start.

use super::*;

fn assert_send_sync<T: Send + Sync + Clone + 'static>() {}

#[test]
fn node_and_builder_are_send_sync() {
    assert_send_sync::<Node>();
    assert_send_sync::<NodeBuilder>();
}

#[test]
fn bind_reports_the_address_and_the_io_error() {
    let first = bind("127.0.0.1:0".parse().expect("addr")).expect("ephemeral bind");
    let taken = first.local_addr().expect("bound address");
    let err = bind(taken).expect_err("the port is taken");
    assert_eq!(err.code(), 31);
    let detail = err.context().detail.clone().unwrap_or_default();
    assert!(detail.contains(&taken.to_string()), "{detail}");
}

#[test]
fn the_listener_is_non_blocking() {
    let listener = bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
    let err = listener.accept().expect_err("no one connects");
    assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
}

#[tokio::test]
async fn a_start_waits_for_a_closing_holder_and_can_be_cancelled_meanwhile() {
    use crate::sidechannel::held::{HeldName, Name};
    // A holder that is closing but never lets go: a real one lets go within milliseconds.
    let closing = tokio_util::sync::CancellationToken::new();
    closing.cancel();
    let _stale = HeldName::register(Name::Unix(9181), closing);
    let start = || Node::builder().id(9181).ignore_environment().start();
    // Cancelled while it waits: the node's runtime is shut down, not dropped in an async
    // context (which would panic).
    let cancelled = tokio::time::timeout(Duration::from_millis(50), start()).await;
    assert!(cancelled.is_err(), "the start should still be waiting");
    // Waited out: the name is free after all (no socket holds it), so the node starts.
    let began = std::time::Instant::now();
    let node = start().await.expect("a start after the wait");
    let waited = began.elapsed();
    assert_eq!(node.id(), NodeId(9181));
    assert!(
        waited >= NAME_RELEASE_WAIT && waited < NAME_RELEASE_WAIT + Duration::from_secs(2),
        "{waited:?}"
    );
}

#[test]
fn the_spin_budget_variable_is_microseconds() {
    assert_eq!(sources::parse_spin_budget_us(" 0").unwrap(), Duration::ZERO);
    assert_eq!(
        sources::parse_spin_budget_us("25").unwrap(),
        Duration::from_micros(25)
    );
    for bad in ["", "-1", "1.5", "10us", "99999999999999999999999"] {
        let e = sources::parse_spin_budget_us(bad).unwrap_err();
        assert_eq!(e.code(), 44, "{bad:?}: {e}");
        assert!(e.to_string().contains("RSM_SPIN_BUDGET_US"), "{e}");
    }
}

#[test]
fn ignore_environment_reads_no_file() {
    let builder = Node::builder().ignore_environment();
    assert!(
        sources::file_choice(builder.config_file.as_deref(), builder.ignore_environment).is_none()
    );
    let named = Node::builder().config_file("/x.toml").ignore_environment();
    assert!(
        matches!(sources::file_choice(named.config_file.as_deref(), named.ignore_environment), Some(sources::FileChoice::Required(p, _)) if p == std::path::Path::new("/x.toml"))
    );
}
