//! Resource limits (filled in below).

pub fn role(other: &str) {
    panic!("unknown role {other}");
}
