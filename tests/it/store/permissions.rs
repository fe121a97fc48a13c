//! A store that answers and refuses (docs/design.md §8.4): an ACL user
//! without a command idemgate needs, a full server, a read-only replica, a
//! key of another type under the prefix.
//!
//! The guarantees checked: a user missing any command a round uses is
//! refused at connect (before a replica would join its group), naming the
//! command; the user docs/configuration.md documents is enough for every round; during
//! a run each of NOPERM, WRONGTYPE, OOM and READONLY comes back as a
//! rejection with its cause (not as an outage), and nothing of the round
//! was judged.

use idemgate::coordinates::TopicTag;
use idemgate::store::redis::{Auth, RedisOptions, RedisStore, RedisTarget};
use idemgate::store::{
    ClaimOutcome, ClaimStore, Publish, Raise, RejectionCause, StoreError, StreamSpec,
};
use idemgate_testkit::servers::{RedisServer, ServerOptions};
use idemgate_testkit::{env, unique};

use super::conformance::{claim, hash, streams, EXACT, PARTITION, T0, TIERED};

/// The ACL line docs/configuration.md gives for idemgate's user, with its user name,
/// password and key pattern replaced.
fn documented_acl(user: &str, password: &str, prefix: &str) -> Vec<String> {
    let reference = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/configuration.md"
    ))
    .expect("docs/configuration.md");
    let line = reference
        .lines()
        .find(|l| l.starts_with("ACL SETUSER gate on >secret ~ig:* "))
        .expect("docs/configuration.md gives the store user's ACL line");
    line.split_whitespace()
        .skip(2)
        .map(|word| match word {
            "gate" => user.to_string(),
            ">secret" => format!(">{password}"),
            "~ig:*" => format!("~{prefix}*"),
            other => other.to_string(),
        })
        .collect()
}

fn set_user(server_url: &str, args: &[String]) {
    let client = redis::Client::open(server_url).expect("redis url");
    let mut connection = client.get_connection().expect("redis connection");
    let mut cmd = redis::cmd("ACL");
    cmd.arg("SETUSER");
    for arg in args {
        cmd.arg(arg);
    }
    cmd.query::<()>(&mut connection).expect("ACL SETUSER");
}

fn options_as(url: &str, user: &str, password: &str, prefix: &str) -> RedisOptions {
    let mut options = RedisOptions::new(RedisTarget::Standalone(url.to_string()), prefix);
    options.auth = Auth {
        username: Some(user.to_string()),
        password: Some(password.to_string()),
    };
    options
}

async fn refusal(options: &RedisOptions, specs: Vec<StreamSpec>) -> String {
    match RedisStore::connect(options, specs).await {
        Ok(_) => panic!("the store connected"),
        Err(StoreError::Refused(why)) => why,
        Err(other) => panic!("not a refusal: {other}"),
    }
}

fn rejection(result: Result<impl std::fmt::Debug, StoreError>) -> RejectionCause {
    match result {
        Err(StoreError::Rejected(rejection)) => rejection.cause,
        other => panic!("not a rejection: {other:?}"),
    }
}

/// A claim and a publish of everything a round can carry, on the tiered
/// stream too (tier-2 inserts and probes, a raise, a done flag).
/// Its offsets start at `base`, where the partition's watermark is.
async fn full_round(store: &dyn ClaimStore, salt: &str, base: i64) -> Result<(), StoreError> {
    let first = claim(EXACT, hash(salt, 1), base + 10, T0);
    let tiered = claim(TIERED, hash(salt, 2), base + 11, T0);
    let won = store.claim(&[first, tiered]).await?;
    assert_eq!(won[0], ClaimOutcome::Won { fresh: true });
    let publish = Publish {
        inserts: vec![idemgate::store::Insert {
            stream: TIERED,
            hash: tiered.hash,
            at: T0,
        }],
        raises: vec![Raise {
            stream: EXACT,
            topic: TopicTag::of("raw.events"),
            partition: PARTITION,
            start: base,
            end: base + 11,
        }],
        ..Publish::default()
    };
    let answer = store
        .round(
            &publish,
            &[claim(TIERED, hash(salt, 2), base + 12, T0)],
            &[EXACT],
        )
        .await?;
    assert_eq!(answer.outcomes.len(), 1);
    assert_ne!(answer.outcomes[0], ClaimOutcome::StoreLost);
    assert_eq!(answer.raised, vec![base + 11]);
    Ok(())
}

#[tokio::test]
async fn the_documented_user_can_run_every_round() {
    let redis = RedisServer::start("acl-documented", ServerOptions::default());
    let salt = unique("acl-documented");
    let prefix = format!("{salt}:");
    set_user(&redis.url(), &documented_acl("gate", "pw", &prefix));
    let store = RedisStore::connect(&options_as(&redis.url(), "gate", "pw", &prefix), streams())
        .await
        .expect("the documented user connects");
    full_round(&store, &salt, 0)
        .await
        .expect("every round runs");
    // Without +info the evicted-keys gauge stays 0, and the figures the
    // store watcher reads (its reachability: /readyz) still come.
    let stats = store
        .stats(T0)
        .await
        .expect("stats for a user without INFO");
    assert_eq!(stats.evicted_keys, 0);
    assert_eq!(stats.filters.len(), 3, "the tiered streams' fill");
}

#[tokio::test]
async fn a_user_missing_a_command_is_refused_at_connect_naming_it() {
    let redis = RedisServer::start("acl-missing", ServerOptions::default());
    // The command taken away, and the name the refusal must carry: DEL and
    // HSET are otherwise only run inside scripts, where Redis would not
    // name them.
    let cases = [
        ("-evalsha", "EVALSHA"),
        ("-eval", "EVAL"),
        ("-del", "DEL"),
        ("-hset", "HSET"),
        ("-bitfield_ro", "BITFIELD_RO"),
        ("-incrby", "INCRBY"),
    ];
    for (n, (take, named)) in cases.into_iter().enumerate() {
        let user = format!("gate{n}");
        let prefix = format!("{}:", unique("acl-missing"));
        let mut acl = documented_acl(&user, "pw", &prefix);
        acl.push(take.to_string());
        set_user(&redis.url(), &acl);
        let why = refusal(&options_as(&redis.url(), &user, "pw", &prefix), streams()).await;
        assert!(
            why.contains(&format!("may not run {named} "))
                || why.contains(&format!("may not run {named} (")),
            "{take}: {why}"
        );
        assert!(
            why.contains("NOPERM") && why.contains(&format!("+{}", named.to_ascii_lowercase())),
            "{why}"
        );
    }
}

#[tokio::test]
async fn a_user_without_redisblooms_probe_is_refused_naming_it() {
    let url = env("IDEMGATE_TEST_REDISBLOOM_URL");
    let salt = unique("acl-bloom");
    let prefix = format!("{salt}:");
    let user = salt.replace(':', "-");
    let mut acl = documented_acl(&user, "pw", &prefix);
    acl.push("+bf.insert".into());
    set_user(&url, &acl);
    let mut options = options_as(&url, &user, "pw", &prefix);
    options.target = RedisTarget::Standalone(url.clone());
    options.filter_backend = Some(idemgate::store::redis::FilterBackend::RedisBloom);
    let why = refusal(&options, streams()).await;
    set_user(&url, &[user.clone(), "off".into()]);
    assert!(why.contains("may not run BF.MEXISTS"), "{why}");
}

/// An ACL without `+exists` (the documented one before overflow parts
/// were asked about): the store still connects and its rounds still run, every
/// overflow part probed; with it, they run too.
#[tokio::test]
async fn a_user_without_exists_still_runs_rounds_on_redisbloom() {
    let url = env("IDEMGATE_TEST_REDISBLOOM_URL");
    for exists in [false, true] {
        let salt = unique("acl-exists");
        let prefix = format!("{salt}:");
        let user = salt.replace(':', "-");
        let mut acl = documented_acl(&user, "pw", &prefix);
        acl.extend(["+bf.insert".to_string(), "+bf.mexists".to_string()]);
        if exists {
            acl.push("+exists".into());
        } else {
            acl.push("-exists".into());
        }
        set_user(&url, &acl);
        let mut options = options_as(&url, &user, "pw", &prefix);
        options.filter_backend = Some(idemgate::store::redis::FilterBackend::RedisBloom);
        let store = RedisStore::connect(&options, streams()).await;
        let round = match &store {
            Ok(store) => full_round(store, &salt, 0).await,
            Err(_) => Ok(()),
        };
        set_user(&url, &[user.clone(), "off".into()]);
        let store = store.unwrap_or_else(|e| panic!("exists {exists}: connect: {e}"));
        round.unwrap_or_else(|e| panic!("exists {exists}: a round: {e}"));
        drop(store);
    }
}

#[tokio::test]
async fn a_full_server_and_a_read_only_replica_are_refused_at_connect() {
    let prefix = format!("{}:", unique("acl-start"));
    let full = RedisServer::start(
        "store-full",
        ServerOptions {
            args: vec!["--maxmemory".into(), "1".into()],
            ..ServerOptions::default()
        },
    );
    let options = RedisOptions::new(RedisTarget::Standalone(full.url()), prefix.as_str());
    let why = refusal(&options, streams()).await;
    assert!(why.contains("(oom)") && why.contains("maxmemory"), "{why}");

    let primary = RedisServer::start("store-primary", ServerOptions::default());
    let replica = RedisServer::start(
        "store-replica",
        ServerOptions {
            args: vec![
                "--replicaof".into(),
                "127.0.0.1".into(),
                primary.port.to_string(),
            ],
            ..ServerOptions::default()
        },
    );
    let options = RedisOptions::new(RedisTarget::Standalone(replica.url()), prefix.as_str());
    let why = refusal(&options, streams()).await;
    assert!(
        why.contains("(readonly)") && why.contains("primary"),
        "{why}"
    );
}

#[tokio::test]
async fn during_a_run_each_lasting_refusal_is_a_rejection_with_its_cause() {
    let redis = RedisServer::start("store-rejections", ServerOptions::default());
    let salt = unique("store-rejections");
    let prefix = format!("{salt}:");
    set_user(&redis.url(), &documented_acl("gate", "pw", &prefix));
    // Claims as keys, so that taking SET away refuses a claim (grouped
    // claims write HSET, which the raise below loses).
    let options = RedisOptions {
        tier1_layout: Some(idemgate::store::redis::Tier1Layout::Keys),
        ..options_as(&redis.url(), "gate", "pw", &prefix)
    };
    let store = RedisStore::connect(&options, streams())
        .await
        .expect("connects");
    full_round(&store, &salt, 0).await.expect("a round before");
    let mut admin = redis.connection().expect("admin connection");

    // WRONGTYPE: another program wrote a hash where a claim's key lives.
    let foreign = hash(&salt, 40);
    let key = store.tier1_key(EXACT, &foreign).expect("key");
    redis::cmd("HSET")
        .arg(&key)
        .arg("f")
        .arg("v")
        .query::<()>(&mut admin)
        .expect("HSET");
    let cause = rejection(store.claim(&[claim(EXACT, foreign, 40, T0)]).await);
    assert_eq!(cause, RejectionCause::WrongType);

    // NOPERM: the user loses SET while the replica runs.
    set_user(&redis.url(), &["gate".into(), "-set".into()]);
    let cause = rejection(store.claim(&[claim(EXACT, hash(&salt, 41), 41, T0)]).await);
    assert_eq!(cause, RejectionCause::NoPerm);
    // ... and a command only a script runs: a watermark raise's HSET.
    set_user(
        &redis.url(),
        &["gate".into(), "+set".into(), "-hset".into()],
    );
    let raise = Publish {
        raises: vec![Raise {
            stream: EXACT,
            topic: TopicTag::of("raw.events"),
            partition: PARTITION,
            start: 11,
            end: 12,
        }],
        ..Publish::default()
    };
    assert_eq!(
        rejection(store.publish(&raise).await),
        RejectionCause::NoPerm
    );
    set_user(&redis.url(), &["gate".into(), "+hset".into()]);
    full_round(&store, &format!("{salt}-again"), 11)
        .await
        .expect("granted again, rounds run");

    // OOM: the server reached maxmemory.
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("1")
        .query::<()>(&mut admin)
        .expect("CONFIG SET maxmemory");
    let cause = rejection(store.claim(&[claim(EXACT, hash(&salt, 42), 42, T0)]).await);
    assert_eq!(cause, RejectionCause::Oom);
    // ... and a tiered stream's tier-2 insert, which goes first.
    let insert = Publish {
        inserts: vec![idemgate::store::Insert {
            stream: TIERED,
            hash: hash(&salt, 44),
            at: T0,
        }],
        ..Publish::default()
    };
    assert_eq!(rejection(store.publish(&insert).await), RejectionCause::Oom);
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("0")
        .query::<()>(&mut admin)
        .expect("CONFIG SET maxmemory 0");

    // READONLY: the server became a replica under the replica's feet.
    let primary = RedisServer::start("store-new-primary", ServerOptions::default());
    redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(primary.port)
        .query::<()>(&mut admin)
        .expect("REPLICAOF");
    let cause = rejection(store.claim(&[claim(EXACT, hash(&salt, 43), 43, T0)]).await);
    assert_eq!(cause, RejectionCause::ReadOnly);
}
