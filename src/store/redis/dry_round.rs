//! The dry round at start (docs/design.md §8.4): every command a worker's
//! rounds send, sent once on probe keys of each stream's own namespace, so
//! that a user the ACL does not let run one of them (or reach the keys), a
//! full server, a read-only replica or a renamed command is refused before
//! the replica joins its group, naming the command, instead of failing
//! every round after it.
//!
//! The scripts are loaded here (`EVAL`) and then called by their SHA
//! (`EVALSHA`), each with operands that make it run every command in it:
//! Redis checks a script's commands against the ACL only when they run,
//! and reports a refused one inside a script without its name, so the
//! same commands go out on their own first and are named from there.
//!
//! The probe keys carry a random suffix (replicas starting together never
//! meet each other's), expire within a minute and are deleted at the end
//! of the trip. Everything goes out in one pipeline per stream; its keys
//! share one hash tag, so a cluster sends it to one node, in order.

use redis::Cmd;
use tracing::warn;

use super::conn::{Conn, Keyed};
use super::tier1::{LuaScript, Scripts};
use super::tier2::FilterBackend;
use crate::store::value::{LUA_DONE_BYTE, OWNER_LEN};
use crate::store::{Mode, RejectionCause, StoreError, StreamSpec};

/// How long a probe key lives, should the final `DEL` not reach it.
const PROBE_TTL_MS: i64 = 60_000;

/// One command of the dry round: what it is, in the words a `NOPERM`
/// remedy needs, and what the worker uses it for.
struct Probe {
    command: &'static str,
    purpose: &'static str,
    keyed: Keyed,
}

/// Sends the dry round of every stream; the first command the server
/// refuses is the answer, named.
pub(crate) async fn run(
    conn: &Conn,
    scripts: &Scripts,
    prefix: &str,
    streams: &[StreamSpec],
    backend: FilterBackend,
) -> Result<(), StoreError> {
    let suffix = random_suffix();
    for spec in streams {
        let probes = probes(scripts, prefix, spec, backend, conn.is_cluster(), &suffix);
        let commands = probes.iter().map(|p| p.keyed.clone()).collect();
        let answers = conn.run(commands).await?;
        for (probe, answer) in probes.iter().zip(answers) {
            if let Err(error) = answer {
                if refuses(probe.command, &error) {
                    return Err(refusal(probe, &spec.name, &error));
                }
            }
        }
    }
    check_info(conn).await;
    Ok(())
}

/// Whether a probe's error answer refuses the start. `NOSCRIPT` to an
/// `EVALSHA` does not: the server let the user call the script by its SHA
/// but lost its script cache since the probe's `EVAL` loaded it (`SCRIPT
/// FLUSH`, a restart or failover in between), which the rounds meet by
/// sending `EVAL` again.
fn refuses(command: &str, error: &redis::RedisError) -> bool {
    !(command == "EVALSHA" && error.code() == Some(super::NOSCRIPT))
}

fn refusal(probe: &Probe, stream: &str, error: &redis::RedisError) -> StoreError {
    let text = error.to_string();
    let why = match RejectionCause::of_reply(error.code(), &text) {
        Some(RejectionCause::NoPerm) => format!(
            "the store user may not run {} (NOPERM), which stream {stream:?} needs for {}: {text}; grant it (ACL SETUSER <user> +{}) with the keys under store.key_prefix",
            probe.command,
            probe.purpose,
            acl_name(probe.command)
        ),
        Some(cause) => format!(
            "{} for {} on stream {stream:?} was refused ({}): {text}; {}",
            probe.command,
            probe.purpose,
            cause.label(),
            cause.remedy()
        ),
        None => format!(
            "{} for {} on stream {stream:?} failed: {text}; idemgate needs it as it is (not renamed or disabled)",
            probe.command, probe.purpose
        ),
    };
    StoreError::Refused(format!("dry round at start: {why}"))
}

/// The ACL name of a command as the probes write it (`SET KEEPTTL` ->
/// `set`, `EVAL (done flags)` -> `eval`).
fn acl_name(command: &str) -> String {
    command
        .split_whitespace()
        .next()
        .unwrap_or(command)
        .to_ascii_lowercase()
}

/// `INFO` only feeds `idemgate_store_evicted_keys`: a server that refuses
/// it (managed services, `-@dangerous` users) is a warning.
async fn check_info(conn: &Conn) {
    let mut info = redis::cmd("INFO");
    info.arg("stats");
    if let Err(error) = conn.on_every_node(&info).await {
        warn!(
            %error,
            metric = crate::metrics::EVICTED_KEYS.name,
            "the store user may not run INFO: the metric stays 0, watch evictions on the server itself"
        );
    }
}

fn random_suffix() -> String {
    let random = std::hash::BuildHasher::hash_one(
        &std::collections::hash_map::RandomState::new(),
        std::process::id(),
    );
    format!("{random:016x}")
}

/// A value shaped like a claim as the scripts read it: `owner` in the
/// first `OWNER_LEN` bytes, the done bit clear.
fn claim_like(owner: u8) -> Vec<u8> {
    let mut value = vec![owner; LUA_DONE_BYTE + 8];
    value[LUA_DONE_BYTE - 1] = 0;
    value
}

fn probes(
    scripts: &Scripts,
    prefix: &str,
    spec: &StreamSpec,
    backend: FilterBackend,
    cluster: bool,
    suffix: &str,
) -> Vec<Probe> {
    let base = format!("{prefix}{}{{dryrun-{suffix}}}", spec.key_id);
    let key = |name: &str| format!("{base}{name}").into_bytes();
    let (claim, done, release, restamp, vanished, marks, group) = (
        key("claim"),
        key("done"),
        key("release"),
        key("restamp"),
        key("vanished"),
        key("marks"),
        key("group"),
    );
    let (progress, identity) = (key("progress"), key("identity"));
    let value = claim_like(1);
    let owner = value[..OWNER_LEN].to_vec();
    let ttl = PROBE_TTL_MS.to_string().into_bytes();
    let mut probes = Vec::new();
    let mut plain = |command, purpose, key: &[u8], args: &[&[u8]]| {
        let mut cmd = redis::cmd(first_word(command));
        cmd.arg(key);
        for arg in args {
            cmd.arg(*arg);
        }
        probes.push(Probe {
            command,
            purpose,
            keyed: Keyed {
                key: key.to_vec(),
                cmd,
            },
        });
    };
    let ttl_arg: &[u8] = &ttl;
    plain(
        "SET NX PX GET",
        "claims",
        &claim,
        &[&value, b"NX", b"PX", ttl_arg, b"GET"],
    );
    plain("GET", "done flags, releases and re-stamps", &claim, &[]);
    plain(
        "SET KEEPTTL",
        "done flags and re-stamps",
        &claim,
        &[&value, b"KEEPTTL"],
    );
    plain("DEL", "releases", &claim, &[]);
    // The identity's places are read with MGET on one server, GET by
    // GET on a cluster (their tags lie on several nodes).
    if !cluster {
        plain("MGET", "the store identity", &claim, &[]);
    }
    let field: &[u8] = b"probe-field-16-b";
    plain("HSETNX", "grouped tier-1 claims", &group, &[field, &value]);
    plain("HSET", "grouped tier-1 claims", &group, &[field, &value]);
    plain("HGET", "grouped tier-1 claims", &group, &[field]);
    plain("HGETALL", "sweeping grouped tier-1 claims", &group, &[]);
    plain("HDEL", "sweeping grouped tier-1 claims", &group, &[field]);
    plain(
        "PEXPIRE NX",
        "grouped tier-1 claims",
        &group,
        &[ttl_arg, b"NX"],
    );
    plain(
        "PEXPIRE GT",
        "grouped tier-1 claims",
        &group,
        &[ttl_arg, b"GT"],
    );
    plain("HSET", "watermark raises", &marks, &[b"probe", b"1"]);
    plain("HGET", "watermark raises", &marks, &[b"probe"]);
    plain("PEXPIRE", "watermark raises", &marks, &[ttl_arg]);
    plain("HGETALL", "watermark reads", &marks, &[]);
    if spec.mode == Mode::Tiered {
        let (filter, count) = (key("filter"), key("count"));
        match backend {
            FilterBackend::RedisBloom => {
                plain(
                    "BF.INSERT",
                    "tier-2 inserts",
                    &filter,
                    &[
                        b"CAPACITY",
                        b"100",
                        b"ERROR",
                        b"0.01",
                        b"NONSCALING",
                        b"ITEMS",
                        b"probe",
                    ],
                );
                plain("BF.MEXISTS", "tier-2 probes", &filter, &[b"probe"]);
            }
            FilterBackend::Bitmap => {
                plain(
                    "BITFIELD",
                    "tier-2 inserts",
                    &filter,
                    &[b"SET", b"u1", b"7", b"1"],
                );
                plain(
                    "BITFIELD_RO",
                    "tier-2 probes",
                    &filter,
                    &[b"GET", b"u1", b"7"],
                );
            }
        }
        plain(
            "PEXPIRE NX",
            "tier-2 generations",
            &filter,
            &[ttl_arg, b"NX"],
        );
        plain("INCRBY", "tier-2 fill counts", &count, &[b"1"]);
        plain("PEXPIRE", "tier-2 fill counts", &count, &[ttl_arg]);
        plain("DEL", "cleaning up the dry round", &filter, &[]);
        plain("DEL", "cleaning up the dry round", &count, &[]);
    }
    // Each script once as `EVAL` (which loads it), with operands that make
    // it run every command in it, then once by its SHA.
    let set = |key: &[u8], probes: &mut Vec<Probe>| {
        let mut cmd = redis::cmd("SET");
        cmd.arg(key).arg(&value[..]).arg("PX").arg(PROBE_TTL_MS);
        probes.push(Probe {
            command: "SET PX",
            purpose: "the dry round's own claims",
            keyed: Keyed {
                key: key.to_vec(),
                cmd,
            },
        });
    };
    // Scripts read the server's clock; TIME takes no key, so it goes in
    // the group's slot by the `Keyed` key alone.
    probes.push(Probe {
        command: "TIME",
        purpose: "grouped tier-1 claims (the server's clock)",
        keyed: Keyed {
            key: group.clone(),
            cmd: redis::cmd("TIME"),
        },
    });
    set(&done, &mut probes);
    set(&release, &mut probes);
    set(&restamp, &mut probes);
    set(&identity, &mut probes);
    let restamped = claim_like(2);
    let raise_args: Vec<Vec<u8>> =
        vec![ttl.clone(), b"probe".to_vec(), b"0".to_vec(), b"5".to_vec()];
    let call = |purpose, command, script, key: &[u8], args| ScriptCall {
        purpose,
        command,
        script,
        keys: vec![key.to_vec()],
        args,
    };
    let tier1 = |purpose, command, script, key: &[u8], args| ScriptCall {
        purpose,
        command,
        script,
        keys: vec![key.to_vec(), group.clone()],
        args,
    };
    let cas = |operand: &[u8]| vec![operand.to_vec(), field.to_vec(), b"1".to_vec()];
    let claim_args = |mode: &[u8]| {
        vec![
            mode.to_vec(),
            ttl.clone(),
            b"1".to_vec(),
            value.clone(),
            field.to_vec(),
            b"1".to_vec(),
        ]
    };
    let mut script_calls = vec![
        tier1(
            "claims",
            "EVAL (claims)",
            &scripts.claim,
            &claim,
            claim_args(b"g"),
        ),
        tier1(
            "claims",
            "EVAL (claims)",
            &scripts.claim,
            &claim,
            claim_args(b"k"),
        ),
        tier1(
            "done flags",
            "EVAL (done flags)",
            &scripts.done,
            &done,
            cas(&owner),
        ),
        tier1(
            "releases",
            "EVAL (releases)",
            &scripts.release,
            &release,
            cas(&owner),
        ),
        tier1(
            "re-stamps",
            "EVAL (re-stamps)",
            &scripts.restamp,
            &restamp,
            vec![
                value.clone(),
                restamped.clone(),
                ttl.clone(),
                field.to_vec(),
                b"g".to_vec(),
            ],
        ),
        tier1(
            "re-stamps",
            "EVAL (re-stamps)",
            &scripts.restamp,
            &vanished,
            vec![
                value.clone(),
                restamped,
                ttl.clone(),
                field.to_vec(),
                b"g".to_vec(),
            ],
        ),
        call(
            "watermark raises",
            "EVAL (watermark raises)",
            &scripts.raise,
            &marks,
            raise_args,
        ),
    ];
    // The marks script bumps (GET, SET), then finds a floor above the
    // mark and marks the identity gone back (GET, SET).
    for (floor, mode) in [(&b"0"[..], &b"1"[..]), (b"999999", b"0")] {
        script_calls.push(ScriptCall {
            purpose: "progress marks",
            command: "EVAL (progress marks)",
            script: &scripts.marks,
            keys: vec![progress.clone(), identity.clone()],
            args: vec![floor.to_vec(), mode.to_vec()],
        });
    }
    if spec.mode == Mode::Tiered {
        script_calls.push(call(
            "early-insert runs",
            "EVAL (early-insert runs)",
            &scripts.early,
            &marks,
            vec![
                b"probe-early".to_vec(),
                b"0-1".to_vec(),
                Vec::new(),
                ttl.clone(),
                ttl.clone(),
                b"0".to_vec(),
            ],
        ));
    }
    for cached in [false, true] {
        for c in &script_calls {
            probes.push(Probe {
                command: if cached { "EVALSHA" } else { c.command },
                purpose: c.purpose,
                keyed: c.script.invoke(cached, &c.keys, &c.args),
            });
        }
    }
    for key in [
        &claim, &done, &release, &restamp, &vanished, &marks, &group, &progress, &identity,
    ] {
        probes.push(Probe {
            command: "DEL",
            purpose: "cleaning up the dry round",
            keyed: Keyed {
                key: key.clone(),
                cmd: del(key),
            },
        });
    }
    probes
}

/// A script called with operands that make it run every command in it.
struct ScriptCall<'a> {
    purpose: &'static str,
    command: &'static str,
    script: &'a LuaScript,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

fn first_word(command: &str) -> &str {
    command.split_whitespace().next().unwrap_or(command)
}

fn del(key: &[u8]) -> Cmd {
    let mut cmd = redis::cmd("DEL");
    cmd.arg(key);
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StreamSpec;
    use std::time::Duration;

    #[test]
    fn a_script_cache_lost_between_its_eval_and_evalsha_refuses_nothing() {
        use redis::{ErrorKind, RedisError, ServerErrorKind};
        let server = |kind| RedisError::from((ErrorKind::Server(kind), "as the server said"));
        let noscript = server(ServerErrorKind::NoScript);
        assert_eq!(noscript.code(), Some(super::super::NOSCRIPT));
        assert!(!refuses("EVALSHA", &noscript));
        assert!(refuses("EVAL (claims)", &noscript));
        assert!(refuses("EVALSHA", &server(ServerErrorKind::NoPerm)));
    }

    #[test]
    fn every_probe_key_of_a_stream_shares_one_hash_tag_under_its_namespace() {
        let spec = StreamSpec::new("bank", Mode::Exact, Duration::from_secs(3600), None);
        let probes = probes(
            &Scripts::new(),
            "idemgate:",
            &spec,
            FilterBackend::Bitmap,
            false,
            "ab",
        );
        let prefix = format!("idemgate:{}{{dryrun-ab}}", spec.key_id);
        assert!(probes.len() > 20);
        for probe in &probes {
            let key = String::from_utf8(probe.keyed.key.clone()).unwrap();
            assert!(key.starts_with(&prefix), "{key}");
        }
    }

    #[test]
    fn a_refused_command_is_named_as_the_acl_knows_it() {
        assert_eq!(acl_name("SET KEEPTTL"), "set");
        assert_eq!(acl_name("EVAL (done flags)"), "eval");
        assert_eq!(acl_name("BF.MEXISTS"), "bf.mexists");
    }
}
