//! What an existing tier-1 value means for a record claiming its hash.
//! Pure, and shared by every backend so they cannot drift apart.

use super::value::ClaimValue;
use super::{millis, Claim, ClaimOutcome, ClaimState, StreamSpec, Tier};

/// The verdict on one existing tier-1 value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The value has lapsed on the store's clock (the caller's time), even
    /// if the server has not collected it yet: the claimant may take it
    /// over with a compare-and-set on the exact old value.
    Lapsed,
    Decided(ClaimOutcome),
}

/// When a value stops counting: a pending claim after its lease, a done one
/// after the tier-1 TTL, both measured from the value's own timestamp.
pub(crate) fn expires_at(value: &ClaimValue, spec: &StreamSpec) -> i64 {
    let ttl = match value.state {
        ClaimState::Pending => spec.lease,
        ClaimState::Done => spec.tier1_ttl,
    };
    value.at.saturating_add(millis(ttl))
}

pub(crate) fn judge(existing: &ClaimValue, claim: &Claim, spec: &StreamSpec) -> Verdict {
    let now = match existing.state {
        ClaimState::Pending => claim.wall,
        ClaimState::Done => claim.at,
    };
    if now >= expires_at(existing, spec) {
        return Verdict::Lapsed;
    }
    let outcome = if existing.holder == claim.holder {
        ClaimOutcome::Own(existing.state)
    } else {
        match existing.state {
            ClaimState::Pending => ClaimOutcome::Held {
                holder: existing.holder,
            },
            ClaimState::Done if existing.digest != claim.digest => ClaimOutcome::Conflict {
                holder: existing.holder,
            },
            ClaimState::Done => ClaimOutcome::Duplicate {
                tier: Tier::Exact,
                holder: Some(existing.holder),
            },
        }
    };
    Verdict::Decided(outcome)
}

/// The tier-1 value a claimant writes when it wins: stamped with wall time,
/// the clock its lease runs on.
pub(crate) fn pending_value(claim: &Claim) -> ClaimValue {
    ClaimValue {
        state: ClaimState::Pending,
        holder: claim.holder,
        digest: claim.digest,
        at: claim.wall,
    }
}
