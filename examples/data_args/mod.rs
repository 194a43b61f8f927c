//! What the data-path examples (`scatter_gather`, `zero_copy_map`, `reconnecting_client`)
//! share: `--name value` arguments parsed by hand, their node, the exporter's last step, and
//! an exit that prints `ok` or the error.

/// Any error, printed as it is.
pub type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// `--name value` pairs, parsed by hand.
pub struct Args(Vec<(String, String)>);

impl Args {
    pub fn parse() -> Res<Args> {
        let mut pairs = Vec::new();
        let mut it = std::env::args().skip(1);
        while let Some(flag) = it.next() {
            let name = flag
                .strip_prefix("--")
                .ok_or(format!("unexpected {flag}"))?;
            let value = it.next().ok_or(format!("{flag} needs a value"))?;
            pairs.push((name.to_string(), value));
        }
        Ok(Args(pairs))
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// A number, decimal or `0x` hexadecimal.
    pub fn num(&self, name: &str, default: Option<u64>) -> Res<u64> {
        match self.get(name) {
            Some(v) => Ok(match v.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16)?,
                None => v.parse()?,
            }),
            None => default.ok_or_else(|| format!("--{name} is needed").into()),
        }
    }

    /// The node: the file `--config` names, else `RSM_CONFIG` and the `RSM_*` variables.
    pub async fn start_node(&self) -> rsm::Result<rsm::Node> {
        let mut builder = rsm::Node::builder();
        if let Some(path) = self.get("config") {
            builder = builder.config_file(path);
        }
        builder.start().await
    }
}

/// Destroys `seg` once its importers have disconnected (at most 10 s): a destroy before
/// would revoke them.
#[allow(
    dead_code,
    reason = "reconnecting_client revokes its client on purpose"
)]
pub async fn destroy_when_left(seg: rsm::ExportSegment) -> Res<()> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while seg.importer_count() > 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    seg.destroy().await?;
    Ok(())
}

/// The process's exit: `ok` on standard output, or the error on standard error.
pub fn exit(outcome: Res<()>) -> std::process::ExitCode {
    match outcome {
        Ok(()) => {
            println!("ok");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
