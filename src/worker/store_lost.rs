//! What the worker does when a round finds a stream's store lost its state
//! (docs/design.md §8.2): the flight stops claiming for the stream
//! (`flight/lost.rs`), and an ERROR line, the `idemgate_store_identity_lost`
//! gauge and `/readyz` say so.

use tracing::error;

use super::pipeline::Pipeline;
use super::Worker;
use crate::store::{Check, StreamLost};

/// What showed the loss: the ERROR line names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Evidence {
    /// A round or the timed check read the stream's store identity.
    Identity,
    /// An assignment read the record of finished runs its committed
    /// metadata names (`runs.rs`).
    RunsRecord,
}

impl Worker {
    /// A round found a stream's store identity missing or changed
    /// (docs/design.md §8.2): from now on its records are parked
    /// (fail-closed) or pass as `unverified` (fail-open), until a restart
    /// after `idemgate rebuild`. Said once, at ERROR, by the metric and by
    /// `/readyz`.
    pub(super) fn on_store_lost(&self, p: &mut Pipeline, lost: &StreamLost, evidence: Evidence) {
        let stream = lost.stream.0;
        let fail_open = self.fail_open(stream);
        if !p.flight.lose(stream, fail_open) {
            return;
        }
        let name = &self.streams[stream].config.spec.name;
        crate::metrics::identity_lost(name);
        self.store_lost[stream].store(true, std::sync::atomic::Ordering::SeqCst);
        let how = match lost.how {
            Check::Changed => "changed",
            Check::Behind => "went back",
            _ => "missing",
        };
        let found = match (evidence, lost.how) {
            (Evidence::Identity, Check::Behind) => {
                "its progress marks lie below what the group's commits recorded: the store came back older (restored from an older snapshot or backup, or a lagging replica promoted), without the claims and watermarks written since"
            }
            (Evidence::Identity, _) => "its store identity is not the one adopted at start",
            (Evidence::RunsRecord, _) => {
                "a record of finished runs a committed offset names is not in it as named"
            }
        };
        let then = if fail_open {
            "its records pass as unverified"
        } else {
            "it stops deciding: nothing is committed past what was decided"
        };
        let remedy = format!("idemgate rebuild {} --stream {name}", self.config_flag);
        error!(stream = %name, found, how, fail_mode = if fail_open { "open" } else { "closed" }, then, remedy = %remedy,
            "the claim store lost this stream's state: stop every replica, run the remedy, then start them again");
    }
}
