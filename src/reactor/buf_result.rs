//! What an operation that owns a buffer resolves to: [`BufResult`], and its error,
//! [`BufError`], which gives the buffer back whenever the provider has let go of it.

use crate::Error;
use std::fmt;

/// The output of an operation that owns a buffer, as in tokio-uring: on success the value
/// (for put and get, the bytes moved) and the buffer, always; on failure a [`BufError`].
///
/// The buffer is not part of the failure for sure because a connection that is lost or
/// withdrawn fails its operations at once, while the provider may still hold their buffers:
/// waiting for the provider could take as long as its own timeouts. [`BufError::into_buf`]
/// returns it whenever the provider had let go of it (every validation error, every failure
/// the provider reported).
///
/// `?` turns a [`BufError`] into an [`Error`]:
///
/// ```no_run
/// # async fn f(imp: rsm::ImportSegment) -> rsm::Result<()> {
/// let (n, buf) = imp.get(0, vec![0u8; 64]).await?;
/// assert_eq!((n, buf.len()), (64, 64));
/// let (_, _buf) = imp.put(0, buf).await?;
/// # Ok(()) }
/// ```
pub type BufResult<T, B> = std::result::Result<(T, B), BufError<B>>;

/// A failed operation: its [`Error`] and, when the provider had let go of it, the buffer.
///
/// ```no_run
/// # async fn f(imp: rsm::ImportSegment) {
/// // Past the end of the segment: nothing is posted, the buffer comes back.
/// let err = imp.put(imp.len(), vec![1u8; 8]).await.unwrap_err();
/// assert!(matches!(err.error(), rsm::Error::BadOffset(_)));
/// let buf = err.into_buf().expect("never posted");
/// assert_eq!(buf, [1u8; 8]);
/// # }
/// ```
pub struct BufError<B> {
    error: Error,
    buf: Option<B>,
}

impl<B> BufError<B> {
    pub(crate) fn new(error: Error, buf: Option<B>) -> Self {
        BufError { error, buf }
    }

    /// What went wrong.
    pub fn error(&self) -> &Error {
        &self.error
    }

    /// The buffer, unless the provider still held it when the operation failed.
    pub fn buf(&self) -> Option<&B> {
        self.buf.as_ref()
    }

    /// The buffer, unless the provider still held it when the operation failed.
    pub fn into_buf(self) -> Option<B> {
        self.buf
    }

    /// The error, dropping the buffer.
    pub fn into_error(self) -> Error {
        self.error
    }

    /// The error and the buffer.
    pub fn into_parts(self) -> (Error, Option<B>) {
        (self.error, self.buf)
    }
}

impl<B> From<BufError<B>> for Error {
    fn from(e: BufError<B>) -> Error {
        e.error
    }
}

impl<B> fmt::Debug for BufError<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufError")
            .field("error", &self.error)
            .field("buf", &self.buf.as_ref().map(|_| ..))
            .finish()
    }
}

impl<B> fmt::Display for BufError<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl<B> std::error::Error for BufError<B> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}
