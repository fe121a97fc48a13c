//! Every statement the store runs, written once per schema and stream at
//! connect, and prepared once per connection (deadpool's statement cache):
//! a warm round sends only binds and executes, pipelined.
//!
//! Claim values are the 28 bytes of `value.rs`: a compare and set compares
//! their first 16 (holder and owner token, `substring(value FROM 1 FOR
//! 16)`); the done flag is the high bit of byte 24 (0-based, as
//! `get_byte`/`set_byte` count).

use super::schema::Tables;

/// The statements of one stream's claims table.
#[derive(Clone, Debug)]
pub(super) struct ClaimSql {
    /// `$1` expiries, `$2` hashes, `$3` values (one per distinct hash, in
    /// claim order), `$4` the TTL in ms, `$5` the adopted identity (NULL
    /// where none was adopted), `$6` the stream's key id. Answers, per
    /// hash asked, whether this statement wrote it and the value and
    /// expiry the statement's snapshot held.
    ///
    /// Why this is `SET NX GET` (docs/design.md §6.1): the `INSERT` writes
    /// a hash that holds no row, and the `UPDATE` one whose row had expired
    /// at the claim's own time (`expires_at <= at`, with `at = expires_at -
    /// ttl` of the row proposed); both answer what they wrote. The read
    /// (`held`) sees the snapshot the statement started with, so for a
    /// hash neither wrote it answers the value that made the insert do
    /// nothing, unchanged by anything this statement did. Under READ
    /// COMMITTED another transaction may commit between that snapshot and
    /// the insert's look at the index: the insert then meets a row the
    /// snapshot lacks (or the update finds a row the snapshot saw expired
    /// rewritten or gone). The answer says so (neither written nor a live
    /// value), and the claim is sent again on its own, never judged as won:
    /// a record wins only where this statement wrote its row. A value read
    /// from the snapshot and changed since (a done flag, a release) is one
    /// the claim met at a moment when the hash was held: the answer of a
    /// `SET NX GET` at that moment.
    ///
    /// Only the hashes the insert did not write (`rest`) are looked up
    /// again, by the update and the read: in steady state nearly every
    /// claim is new, and a hash the insert wrote has no row in the
    /// statement's snapshot anyway (a data-modifying `WITH` is not seen by
    /// the rest of its statement), so reading it back was an index probe
    /// per claim for nothing (about a quarter of the statement's time,
    /// measured on 1,000-claim batches).
    ///
    /// `DO NOTHING` rather than `DO UPDATE ... WHERE expired`: the latter
    /// locks every live row it meets, so two rounds that claim each other's
    /// held hashes while setting their done flags could deadlock; this
    /// locks only the expired rows it rewrites. The rows go in hash order
    /// (the caller sorts them), so two rounds inserting the same new hashes
    /// wait on each other in one order, never in a cycle.
    pub(super) claim: String,
    /// `$1` hashes, `$2` owner bytes: sets the done flag where the claim
    /// carries that owner; answers the pairs set (now or before).
    pub(super) done: String,
    /// As `done`: deletes pending claims of that owner.
    pub(super) release: String,
    /// `$1` hash, `$2` the value judged, `$3` the new value, `$4` the
    /// expiry for a row that vanished meanwhile: writes over exactly the
    /// value judged (the row keeps its expiry). Answers whether it wrote,
    /// and the value there when it did not.
    pub(super) overwrite: String,
    /// `$1` expiries, `$2` hashes, `$3` values: written over whatever the
    /// hashes hold (`idemgate rebuild`).
    pub(super) restore: String,
}

/// The round's shared statements.
#[derive(Clone, Debug)]
pub(super) struct Sql {
    pub(super) claims: Vec<ClaimSql>,
    /// `$1` stream, `$2` topic, `$3` partition, `$4` start, `$5` end:
    /// `W = max(W, end)` only where `W >= start`, an absent `W` counting as
    /// `start`; answers `W` after.
    pub(super) raise: String,
    /// `$1` streams: their watermarks.
    pub(super) marks: String,
    /// `$1` streams: their reset ranges.
    pub(super) ranges: String,
    /// `$1` streams: their identities.
    pub(super) identities: String,
    /// `$1` stream: its identity.
    pub(super) identity: String,
    /// `$1` stream, `$2` identity, `$3` replace: writes it (over another
    /// only with `replace`).
    pub(super) write_identity: String,
    /// `$1` stream, `$2` topic, `$3` partition, `$4` abandoned ranges,
    /// `$5`, `$6` the replay range (or NULLs).
    pub(super) write_ranges: String,
    /// `$1` stream, `$2` topic, `$3` partition: its ranges are gone.
    pub(super) delete_ranges: String,
    /// A record of finished runs by its name: `$1` stream, `$2` topic,
    /// `$3` partition, `$4` writer, `$5` sequence; then `$6` its expiry
    /// and `$7` its content (written once: a second write moves only the
    /// expiry), or `$6` now (read), or `$6` now and `$7` the new expiry
    /// (refresh).
    pub(super) put_runs: String,
    pub(super) get_runs: String,
    pub(super) refresh_runs: String,
    pub(super) delete_runs: String,
    /// A stream's progress mark, compared, bumped or raised
    /// (`marks::statement`).
    pub(super) progress: String,
}

impl Sql {
    pub(super) fn new(tables: &Tables) -> Sql {
        let w = &tables.watermarks;
        let r = &tables.ranges;
        let i = &tables.identities;
        let f = &tables.runs;
        let name =
            "stream = $1 AND topic = $2 AND partition = $3 AND writer = $4 AND sequence = $5";
        Sql {
            put_runs: format!(
                "INSERT INTO {f} AS f (stream, topic, partition, writer, sequence, expires_at, content) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7) \
                 ON CONFLICT (stream, topic, partition, writer, sequence) \
                 DO UPDATE SET expires_at = GREATEST(f.expires_at, EXCLUDED.expires_at)"
            ),
            get_runs: format!("SELECT content FROM {f} WHERE {name} AND expires_at > $6"),
            refresh_runs: format!(
                "UPDATE {f} SET expires_at = GREATEST(expires_at, $7) \
                 WHERE {name} AND expires_at > $6 RETURNING 1"
            ),
            delete_runs: format!("DELETE FROM {f} WHERE {name}"),
            progress: super::marks::statement(i),
            claims: tables.claims.iter().map(|c| ClaimSql::new(c, i)).collect(),
            raise: format!(
                "WITH up AS (INSERT INTO {w} AS w (stream, topic, partition, below) \
                   VALUES ($1, $2, $3, GREATEST($4::bigint, $5::bigint)) \
                   ON CONFLICT (stream, topic, partition) \
                   DO UPDATE SET below = GREATEST(w.below, EXCLUDED.below) \
                   WHERE w.below >= $4 RETURNING below) \
                 SELECT below FROM up \
                 UNION ALL SELECT below FROM {w} \
                   WHERE stream = $1 AND topic = $2 AND partition = $3 \
                   AND NOT EXISTS (SELECT 1 FROM up)"
            ),
            marks: format!(
                "SELECT stream, topic, partition, below FROM {w} WHERE stream = ANY($1)"
            ),
            ranges: format!(
                "SELECT stream, topic, partition, abandoned, replay_from, replay_to \
                 FROM {r} WHERE stream = ANY($1)"
            ),
            identities: format!("SELECT stream, identity FROM {i} WHERE stream = ANY($1)"),
            identity: format!("SELECT identity FROM {i} WHERE stream = $1"),
            write_identity: format!(
                "INSERT INTO {i} AS i (stream, identity) VALUES ($1, $2) \
                 ON CONFLICT (stream) DO UPDATE SET identity = EXCLUDED.identity WHERE $3"
            ),
            write_ranges: format!(
                "INSERT INTO {r} AS r (stream, topic, partition, abandoned, replay_from, replay_to) \
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (stream, topic, partition) \
                 DO UPDATE SET abandoned = EXCLUDED.abandoned, \
                 replay_from = EXCLUDED.replay_from, replay_to = EXCLUDED.replay_to"
            ),
            delete_ranges: format!(
                "DELETE FROM {r} WHERE stream = $1 AND topic = $2 AND partition = $3"
            ),
        }
    }
}

impl ClaimSql {
    fn new(c: &str, identities: &str) -> ClaimSql {
        ClaimSql {
            claim: format!(
                "WITH input AS (SELECT * FROM unnest($1::bigint[], $2::bytea[], $3::bytea[]) \
                   AS i(expires_at, hash, value)), \
                 live AS (SELECT 1 WHERE $5::text IS NULL OR EXISTS \
                   (SELECT 1 FROM {identities} WHERE stream = $6 AND identity = $5)), \
                 ins AS (INSERT INTO {c} (expires_at, hash, value) \
                   SELECT expires_at, hash, value FROM input WHERE EXISTS (SELECT 1 FROM live) \
                   ON CONFLICT (hash) DO NOTHING RETURNING hash), \
                 rest AS (SELECT * FROM input WHERE hash NOT IN (SELECT hash FROM ins)), \
                 held AS (SELECT c.hash, c.value, c.expires_at FROM rest \
                   JOIN {c} AS c ON c.hash = rest.hash), \
                 up AS (UPDATE {c} AS c SET expires_at = rest.expires_at, value = rest.value \
                   FROM rest WHERE c.hash = rest.hash AND EXISTS (SELECT 1 FROM live) \
                   AND c.expires_at <= rest.expires_at - $4::bigint RETURNING c.hash) \
                 SELECT input.hash, ins.hash IS NOT NULL OR up.hash IS NOT NULL, \
                   held.value, held.expires_at \
                 FROM input LEFT JOIN ins ON ins.hash = input.hash \
                 LEFT JOIN up ON up.hash = input.hash \
                 LEFT JOIN held ON held.hash = input.hash"
            ),
            done: format!(
                "UPDATE {c} AS c SET value = set_byte(c.value, 24, get_byte(c.value, 24) | 128) \
                 FROM unnest($1::bytea[], $2::bytea[]) AS d(hash, owner) \
                 WHERE c.hash = d.hash AND substring(c.value FROM 1 FOR 16) = d.owner \
                 RETURNING c.hash, d.owner"
            ),
            release: format!(
                "DELETE FROM {c} AS c USING unnest($1::bytea[], $2::bytea[]) AS d(hash, owner) \
                 WHERE c.hash = d.hash AND substring(c.value FROM 1 FOR 16) = d.owner \
                 AND get_byte(c.value, 24) < 128 \
                 RETURNING c.hash, d.owner"
            ),
            overwrite: format!(
                "WITH up AS (UPDATE {c} SET value = $3 WHERE hash = $1 AND value = $2 \
                   RETURNING 1), \
                 ins AS (INSERT INTO {c} (expires_at, hash, value) SELECT $4, $1, $3 \
                   WHERE NOT EXISTS (SELECT 1 FROM up) \
                   AND NOT EXISTS (SELECT 1 FROM {c} WHERE hash = $1) \
                   ON CONFLICT (hash) DO NOTHING RETURNING 1) \
                 SELECT EXISTS (SELECT 1 FROM up) OR EXISTS (SELECT 1 FROM ins), \
                   (SELECT value FROM {c} WHERE hash = $1)"
            ),
            restore: format!(
                "INSERT INTO {c} AS c (expires_at, hash, value) \
                 SELECT * FROM unnest($1::bigint[], $2::bytea[], $3::bytea[]) \
                 ON CONFLICT (hash) DO UPDATE \
                 SET expires_at = EXCLUDED.expires_at, value = EXCLUDED.value"
            ),
        }
    }
}
