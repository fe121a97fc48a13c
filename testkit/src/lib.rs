//! What idemgate's tests and its bench share.
