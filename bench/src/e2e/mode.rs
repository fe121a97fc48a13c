//! The modes a worker run is in: which store, which mode of claims,
//! which guarantee.

use anyhow::{bail, Result};
use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Mode {
    Exact,
    /// Exact mode with tier 1 written as a key per claim
    /// (`store.tier1_layout = "keys"`, what earlier versions write), beside
    /// the grouped layout fresh streams write.
    ExactKeys,
    /// Exact mode with `guarantee = "exactly-once"`.
    ExactlyOnce,
    RedisBloom,
    Bitmap,
    /// Exact mode on the PostgreSQL store (`store.kind = "postgres"`).
    Postgres,
}

impl Mode {
    pub fn parse(text: &str) -> Result<Mode> {
        Ok(match text {
            "exact" => Mode::Exact,
            "exact-keys" | "keys" => Mode::ExactKeys,
            "exactly-once" | "eos" => Mode::ExactlyOnce,
            "redisbloom" | "bloom" => Mode::RedisBloom,
            "bitmap" | "bitmaps" => Mode::Bitmap,
            "postgres" | "postgresql" | "pg" => Mode::Postgres,
            other => {
                bail!("--modes: {other} is not exact, exact-keys, exactly-once, redisbloom, bitmap or postgres")
            }
        })
    }

    pub fn label(self) -> &'static str {
        match self {
            Mode::Exact => "exact",
            Mode::ExactKeys => "exact, tier 1 as keys",
            Mode::ExactlyOnce => "exact, exactly once",
            Mode::RedisBloom => "tiered, RedisBloom",
            Mode::Bitmap => "tiered, bitmaps",
            Mode::Postgres => "exact, PostgreSQL",
        }
    }

    /// Exact claims, no tier 2: every event novel exactly once.
    pub fn is_exact(self) -> bool {
        matches!(
            self,
            Mode::Exact | Mode::ExactKeys | Mode::ExactlyOnce | Mode::Postgres
        )
    }

    pub fn short(self) -> &'static str {
        match self {
            Mode::Exact => "exact",
            Mode::ExactKeys => "keys",
            Mode::ExactlyOnce => "eos",
            Mode::RedisBloom => "bloom",
            Mode::Bitmap => "bitmap",
            Mode::Postgres => "pg",
        }
    }
}
