//! What can go wrong with the store, in the words an operator acts on.
//!
//! An outage (`Unavailable`) passes by itself; a rejection does not: the
//! server answered, and it will answer the same until someone changes its
//! ACL, its memory, its role or the keys under idemgate's prefix
//! (docs/design.md §8.4). Both fail the round alike (nothing is decided
//! from a failed round, and the breaker counts both), but a rejection is
//! logged at ERROR with its cause and counted under its own label.

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The server did not answer or answered with an I/O error: the breaker
    /// counts these.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The server answered something the protocol does not allow.
    #[error("store protocol error: {0}")]
    Protocol(String),
    /// The server is set up in a way that would lose claims.
    #[error("store refused: {0}")]
    Refused(String),
    /// The server refused a command for a reason that lasts until an
    /// operator acts (NOPERM, WRONGTYPE, OOM, READONLY).
    #[error("{0}")]
    Rejected(Rejection),
    #[error("unknown stream index {0}")]
    UnknownStream(usize),
}

impl StoreError {
    /// Every `cause` label, for the series created at zero.
    pub const CAUSES: [&'static str; 7] = [
        "unavailable",
        "protocol",
        "noperm",
        "wrongtype",
        "oom",
        "readonly",
        "diskfull",
    ];

    /// The `cause` label of `idemgate_store_errors_total`.
    pub fn cause(&self) -> &'static str {
        match self {
            StoreError::Unavailable(_) => "unavailable",
            StoreError::Rejected(rejection) => rejection.cause.label(),
            StoreError::Protocol(_) | StoreError::Refused(_) | StoreError::UnknownStream(_) => {
                "protocol"
            }
        }
    }
}

/// Why the server refused a command for good.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RejectionCause {
    /// The ACL user may not run a command, or reach a key, idemgate needs.
    NoPerm,
    /// A key under idemgate's prefix holds another type: something else
    /// writes there.
    WrongType,
    /// `maxmemory` reached under `noeviction`: no claim can be written.
    Oom,
    /// The connection reached a read-only replica.
    ReadOnly,
    /// PostgreSQL's disk (or a quota) is full: no claim can be written.
    DiskFull,
}

impl RejectionCause {
    pub const ALL: [RejectionCause; 5] = [
        RejectionCause::NoPerm,
        RejectionCause::WrongType,
        RejectionCause::Oom,
        RejectionCause::ReadOnly,
        RejectionCause::DiskFull,
    ];

    pub fn label(self) -> &'static str {
        match self {
            RejectionCause::NoPerm => "noperm",
            RejectionCause::WrongType => "wrongtype",
            RejectionCause::Oom => "oom",
            RejectionCause::ReadOnly => "readonly",
            RejectionCause::DiskFull => "diskfull",
        }
    }

    /// What an operator does about it.
    pub fn remedy(self) -> &'static str {
        match self {
            RejectionCause::NoPerm => {
                "grant the store user the command (ACL SETUSER <user> +<command>) and keys under store.key_prefix (postgres: GRANT the role USAGE on store.schema and SELECT, INSERT, UPDATE, DELETE on its tables)"
            }
            RejectionCause::WrongType => {
                "a key under store.key_prefix holds another type: another program writes there; give idemgate a prefix of its own (postgres: a table of store.schema was dropped or altered; give idemgate a schema of its own)"
            }
            RejectionCause::Oom => {
                "redis reached maxmemory: raise it, or shorten the ttls the plan sized it for (`idemgate plan`)"
            }
            RejectionCause::ReadOnly => {
                "the url reaches a read-only replica: point store.url at the primary (or the cluster's seeds)"
            }
            RejectionCause::DiskFull => {
                "postgres ran out of disk: free space or grow the volume (and check that the janitor deletes expired claims: idemgate_store_janitor_deleted_total)"
            }
        }
    }

    /// The cause of a server's error reply, where it is one of these. A
    /// command refused inside a script is reported as a plain `ERR` by
    /// Redis 7.0 ("the user executing the script can't run this command").
    pub fn of_reply(code: Option<&str>, text: &str) -> Option<RejectionCause> {
        match code {
            Some("NOPERM") => Some(RejectionCause::NoPerm),
            Some("WRONGTYPE") => Some(RejectionCause::WrongType),
            Some("OOM") => Some(RejectionCause::Oom),
            Some("READONLY") => Some(RejectionCause::ReadOnly),
            _ if text.contains("can't run this command") => Some(RejectionCause::NoPerm),
            _ => None,
        }
    }
}

/// A command the server refused for good, with the server's own words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    pub cause: RejectionCause,
    /// What idemgate was doing ("claim", "done flags", ...) and the
    /// server's reply.
    pub detail: String,
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "store rejected a command ({}): {}: {}",
            self.cause.label(),
            self.detail,
            self.cause.remedy()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_permanent_reply_has_its_cause_and_anything_else_none() {
        let cases = [
            (Some("NOPERM"), "NOPERM this user has no permissions to run the 'del' command", Some(RejectionCause::NoPerm)),
            (Some("ERR"), "ERR The user executing the script can't run this command or subcommand script: 06, on @user_script:1.", Some(RejectionCause::NoPerm)),
            (Some("WRONGTYPE"), "WRONGTYPE Operation against a key holding the wrong kind of value", Some(RejectionCause::WrongType)),
            (Some("OOM"), "OOM command not allowed when used memory > 'maxmemory'.", Some(RejectionCause::Oom)),
            (Some("READONLY"), "READONLY You can't write against a read only replica.", Some(RejectionCause::ReadOnly)),
            (Some("NOSCRIPT"), "NOSCRIPT No matching script.", None),
            (Some("ERR"), "ERR syntax error", None),
            (None, "connection reset by peer", None),
        ];
        for (code, text, cause) in cases {
            assert_eq!(RejectionCause::of_reply(code, text), cause, "{text}");
        }
    }

    #[test]
    fn a_rejection_says_its_cause_the_servers_words_and_the_remedy() {
        let error = StoreError::Rejected(Rejection {
            cause: RejectionCause::Oom,
            detail: "claim: OOM command not allowed".into(),
        });
        let text = error.to_string();
        assert!(
            text.contains("(oom)") && text.contains("claim: OOM") && text.contains("maxmemory"),
            "{text}"
        );
        assert_eq!(error.cause(), "oom");
        assert_eq!(StoreError::Unavailable("x".into()).cause(), "unavailable");
    }
}
