//! Which tier of the store recognised a duplicate: the store's answer
//! names it, a decision carries it in its `idemgate-tier` header, and the
//! metrics count hits by it. A leaf: it imports nothing of the crate.

/// Which tier recognised a duplicate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tier {
    Exact,
    Filter,
}

impl Tier {
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Tier::Exact => "exact",
            Tier::Filter => "filter",
        }
    }
}
