//! What every integration test shares: unique names and the addresses of
//! the servers the test script started.

/// A name no other test (or earlier run) uses: for topics, groups and key
/// prefixes.
pub fn unique(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "t{}-{name}-{nanos:x}-{}",
        std::process::id(),
        rand::random::<u32>()
    )
}

/// A server address from the environment; panics with how to get it.
pub fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run the suite with scripts/test.sh, which starts the servers")
    })
}
