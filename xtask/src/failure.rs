//! The one error type: a message for the user and the exit status to leave with.

/// Why xtask stops, and the exit status it stops with.
#[derive(Debug)]
pub struct Failure {
    pub message: String,
    pub code: u8,
}

impl Failure {
    pub fn new(message: impl Into<String>) -> Self {
        Self::with_code(message, 1)
    }

    pub fn with_code(message: impl Into<String>, code: u8) -> Self {
        Self {
            message: message.into(),
            code,
        }
    }
}
